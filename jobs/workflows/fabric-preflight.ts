import type { Logger } from 'pino';
import type { SecretBroker } from '../../clients/secrets/broker';
import type { PrismaClient } from '../../src/generated/prisma/client';
import type { Tx } from '../../src/db/client';
import { AppError } from '../../src/errors';
import { listComputeNodes } from '../../src/modules/fabric/compute-nodes';
import { findingsOf, type Cidr, type NodeOverride, type ScanRow, type VtepPoolView } from '../../src/modules/fabric/preflight';
import { PREFLIGHT_RESULT_STEP, recordPreflight } from '../../src/modules/fabric/preflight-run';
import { scanNodes } from '../../src/modules/fabric/preflight-scan';
import { complete, failed } from '../steps';
import type { DetachedDef, DetachedLease } from '../engine-detached';
import { LeaseLost } from '../engine-lease';

/**
 * The preflight as a workflow run (issue 23 item 2): `fabric-preflight`, a detached run of the
 * engine, two steps. `scan-nodes` reads every compute node over SSH (preflight-scan.ts) and keeps
 * what each one answered in its memo; `resolve` turns that into the findings (preflight.ts, pure),
 * records them with their event and keeps the answer in its memo, in the transaction that ends
 * the run. The request (preflight-run.ts) answers with that memo. A run taken up again after its
 * worker died does not scan again once the scan step finished.
 */

export interface PreflightRunDeps {
  prisma: PrismaClient;
  secrets: SecretBroker | null;
  log: Logger;
}

interface PreflightParams {
  underlay: Cidr;
  overrides: NodeOverride[];
  vtepPool: VtepPoolView;
}

interface ScanMemo {
  nodes: { nodeIp: string; fqdn: string }[];
  rows: ScanRow[];
}

const SCAN_STEP = 0;

export function fabricPreflightWorkflow(deps: PreflightRunDeps): DetachedDef {
  const write = <T>(lease: DetachedLease, fn: (tx: Tx) => Promise<T>) => lease.serial(() => deps.prisma.$transaction(async (tx) => {
    await lease.fence(tx);
    return fn(tx);
  }));
  return {
    kind: 'fabric-preflight',
    run: async (lease) => {
      const params = lease.run.params as unknown as PreflightParams;
      let current = SCAN_STEP;
      try {
        const recorded = await lease.steps(deps.prisma);
        const scanRow = recorded.find((s) => s.idx === SCAN_STEP);
        let scan = scanRow?.status === 'succeeded' ? (scanRow.memo as unknown as ScanMemo) : null;
        // Taken up again after the scan finished: only the resolve step runs again (its next attempt).
        if (scan) await write(lease, (tx) => lease.stepStarted(tx, PREFLIGHT_RESULT_STEP));
        if (!scan) {
          await write(lease, async (tx) => {
            await lease.layOut(tx, [
              { idx: SCAN_STEP, name: 'scan-nodes', title: 'Reading every compute node over SSH' },
              { idx: PREFLIGHT_RESULT_STEP, name: 'resolve', title: 'Resolving the underlay and recording the findings' },
            ]);
            await lease.stepStarted(tx, SCAN_STEP);
          });
          const nodes = await listComputeNodes(deps.prisma);
          const rows = await scanNodes(deps, nodes);
          scan = { nodes: nodes.map((n) => ({ nodeIp: n.nodeIp, fqdn: n.fqdn })), rows };
          const unreachable = rows.filter((r) => !r.ok).length;
          const memo = scan;
          await write(lease, async (tx) => {
            await lease.stepEnded(tx, SCAN_STEP, complete(`${rows.length} node(s) read${unreachable ? `, ${unreachable} of them not` : ''}`), memo as unknown as Record<string, unknown>);
            await lease.stepStarted(tx, PREFLIGHT_RESULT_STEP);
          });
        }
        current = PREFLIGHT_RESULT_STEP;
        const result = findingsOf(scan.nodes, scan.rows, params.underlay, params.overrides, params.vtepPool);
        await write(lease, async (tx) => {
          await recordPreflight(tx, result);
          await lease.stepEnded(tx, PREFLIGHT_RESULT_STEP, complete(result.ready ? 'ready' : 'not ready'), { result });
          await lease.end(tx, { status: 'succeeded' });
        });
      } catch (error) {
        if (error instanceof LeaseLost || lease.lost.aborted) throw error;
        // The request answers with this error: an AppError keeps its code (a service SSH key not configured...).
        const code = error instanceof AppError ? error.code : 'INTERNAL';
        const message = error instanceof AppError ? error.message : 'the preflight failed: see the service log';
        if (!(error instanceof AppError)) deps.log.error({ err: error, runId: lease.run.id }, 'the preflight run failed');
        await write(lease, async (tx) => {
          await lease.stepEnded(tx, current, failed(code, message));
          await lease.end(tx, { status: 'failed', code, message });
        });
      }
    },
    // Nothing of the preflight's own to finish: the request waiting for it reads the run's failure.
    lost: async () => undefined,
  };
}
