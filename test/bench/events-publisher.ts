/**
 * The publishing process of `npm run bench -- events`: commits outbox rows straight into the
 * service's database at a fixed rate, in small transactions, from a process of its own. After each
 * commit it reports (over IPC) the batch number and the monotonic clock at commit, so the bench can
 * measure delivery from commit. Not run on its own.
 *
 * Input (IPC, first message): { databaseUrl, rate, seconds, batchMs, tenantId, siteId, nodes: [id, poolId][] }
 */
import pg from 'pg';

interface Start {
  databaseUrl: string;
  rate: number;
  seconds: number;
  batchMs: number;
  tenantId: string;
  siteId: string;
  nodes: [string, string][];
}

async function publish(start: Start): Promise<void> {
  const client = new pg.Client({ connectionString: start.databaseUrl, application_name: 'bench-publisher' });
  await client.connect();
  const perBatch = Math.max(1, Math.round((start.rate * start.batchMs) / 1000));
  const batches = Math.round((start.seconds * 1000) / start.batchMs);
  const began = performance.now();
  let sent = 0;
  let pending: [number, string][] = [];
  const flush = () => {
    if (pending.length) process.send!({ commits: pending });
    pending = [];
  };
  const flusher = setInterval(flush, 50);
  for (let b = 0; b < batches; b += 1) {
    // Paced by the clock, not by the previous commit: a slow commit is caught up, not forgotten.
    const due = began + b * start.batchMs;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const ids: string[] = [];
    const pools: string[] = [];
    for (let i = 0; i < perBatch; i += 1) {
      const [id, pool] = start.nodes[(b * perBatch + i) % start.nodes.length]!;
      ids.push(id);
      pools.push(pool);
    }
    await client.query(
      `INSERT INTO event (type, tenant_id, site_id, pool_id, node_id, subject, payload)
       SELECT 'node.bench.tick', $1, $2, n.pool_id, n.id, n.id, jsonb_build_object('b', $3::int, 'i', n.i - 1)
         FROM unnest($4::text[], $5::text[]) WITH ORDINALITY AS n(id, pool_id, i)`,
      [start.tenantId, start.siteId, b, ids, pools],
    );
    pending.push([b, String(process.hrtime.bigint())]);
    sent += perBatch;
  }
  clearInterval(flusher);
  flush();
  await client.end();
  process.send!({ done: { sent, perBatch, batches, seconds: (performance.now() - began) / 1000 } });
}

process.once('message', (start: Start) => {
  publish(start).then(
    () => process.disconnect(),
    (error: unknown) => {
      console.error('publisher failed:', error);
      process.exit(1);
    },
  );
});
