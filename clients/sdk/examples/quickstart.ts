import { EnrollDocument, MetalClient, MetalError, MetalNodesDocument, WorkflowProgressDocument } from '../src';

/**
 * Lists a pool's nodes, enrolls a machine by its BMC, then watches its enroll workflow until the
 * node leaves `enrolling`. Returns the state it moved to (e.g. `inspecting`, or `failed`).
 */
export async function quickstart(opts: {
  url: string; // e.g. http://127.0.0.1:8080
  token: string;
  siteId: string;
  poolId: string;
  bmcAddress: string;
  bmcPassword: string;
  print?: (line: string) => void;
}): Promise<string | undefined> {
  const print = opts.print ?? console.log;
  const client = new MetalClient({ url: opts.url, token: opts.token });
  try {
    // Every node of the pool, page after page (a Relay connection as an async iterator).
    for await (const node of client.paginate(MetalNodesDocument, { filter: { poolId: opts.poolId } }, (data) => data.nodes)) {
      print(`${node.name}\t${node.provisionState}${node.lastError ? `\t${node.lastError.code}` : ''}`);
    }

    // Enroll a machine by its BMC. The password goes to the service's secret broker: never returned.
    let workflowId: string;
    try {
      const { enrollNode } = await client.request(EnrollDocument, {
        input: {
          siteId: opts.siteId,
          poolId: opts.poolId,
          bmc: { address: opts.bmcAddress, driver: 'redfish', credentials: { username: 'root', password: opts.bmcPassword } },
        },
      });
      print(`enrolled ${enrollNode.node.id}`);
      workflowId = enrollNode.node.workflowId!;
    } catch (error) {
      // Refusals carry the service's code; INVALID_INPUT names the field.
      if (error instanceof MetalError && error.code === 'INVALID_INPUT') {
        print(`refused (${error.field}): ${error.message}`);
        return undefined;
      }
      throw error;
    }

    // Its enroll workflow, live (graphql-ws; { transport: 'sse' } for GraphQL over SSE). A dropped
    // connection or a restarting service is resumed from the last event's cursor on its own.
    for await (const { workflowProgress: event } of client.subscribe(WorkflowProgressDocument, { runId: workflowId })) {
      const payload = event.payload as { step?: string; status?: string; to?: string; message?: string | null };
      if (event.type === 'workflow.step') print(`  ${payload.step}: ${payload.status}${payload.message ? ` (${payload.message})` : ''}`);
      else print(`  ${event.type}`);
      if (event.type.startsWith('node.provision.') && payload.to !== 'enrolling') return payload.to; // leaving the loop closes the stream
    }
    return undefined;
  } finally {
    await client.close();
  }
}
