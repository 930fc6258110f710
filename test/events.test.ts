import { spawn } from 'node:child_process';
import pg from 'pg';
import { fromRoot } from '../src/paths';
import { pruneEvents } from '../src/events/retention';
import { PRUNE_CRON } from '../jobs/workers';
import { createTestDatabase, startTestApp, type TestApp } from './helpers/app';
import { gql } from './helpers/client';
import { makeTenantTree, makeToken } from './helpers/fixtures';
import { restStream, sseSubscribe, until, wsClient, wsSubscribe } from './helpers/streams';

const EVENTS = 'subscription ($filter: EventFilter, $after: String) { events(filter: $filter, after: $after) { cursor type tenantId nodeId subject payload } }';
const RETIRE = 'mutation ($i: MetalNodeVerbInput!) { retireNode(input: $i) { node { id provisionState } } }';

type Tree = Awaited<ReturnType<typeof makeTenantTree>>;
const MARK = 'node.test.mark';
let marks = 0;

/**
 * Publishes marker events of `tree`'s tenant until every stream has one of them. Streams deliver
 * in commit order, so a stream that has a marker has everything committed before it: the way to
 * know a stream is live before acting, and that an event it must not see would have come by now.
 * (A stream that is not live yet misses a marker, hence more than one.)
 */
async function mark(db: { query(text: string, values?: unknown[]): Promise<unknown> }, tree: Tree, streams: (() => any[])[]): Promise<void> {
  const labels = new Set<string>();
  const heard = () => streams.every((events) => events().some((e) => labels.has(e?.payload?.mark)));
  for (let attempt = 0; attempt < 50 && !heard(); attempt += 1) {
    const label = `mark-${(marks += 1)}`;
    labels.add(label);
    await db.query(
      `INSERT INTO event (type, tenant_id, site_id, pool_id, node_id, subject, payload) VALUES ($1, $2, $3, $4, $5, $6, jsonb_build_object('mark', $6::text))`,
      [MARK, tree.tenant.id, tree.site.id, tree.pools[0]!.id, tree.nodes[0]!.id, label],
    );
    for (let i = 0; i < 10 && !heard(); i += 1) await new Promise((r) => setTimeout(r, 20));
  }
  await until(heard, 5000, `a marker on every stream (${[...labels].join(', ')})`);
}
/** What a stream received before (or without) the markers. */
const withoutMarks = (events: any[]) => events.filter((e) => e.type !== MARK);

describe('the event stream', () => {
  let t: TestApp;
  let sql: pg.Client;
  let a: Awaited<ReturnType<typeof makeTenantTree>>;
  let b: Awaited<ReturnType<typeof makeTenantTree>>;
  let tokenA: string;
  let tokenB: string;

  beforeAll(async () => {
    // The workers run (the retention schedule is theirs) but advance no workflow: these tests
    // compare the stream's head with the events they publish, and the retire workflows' step
    // events, written beside them, moved it (a flaky "expected 1036n, received 1035n").
    t = await startTestApp({ subscriberBuffer: 1000, workflowEngine: false });
    sql = new pg.Client({ connectionString: t.app.databaseUrl });
    await sql.connect();
    a = await makeTenantTree(t.app.database.prisma, 'stream-a', { pools: 1, nodesPerPool: 40 });
    b = await makeTenantTree(t.app.database.prisma, 'stream-b', { pools: 1, nodesPerPool: 40 });
    tokenA = await makeToken(t.app.database.prisma, a.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: a.tenant.id }]);
    tokenB = await makeToken(t.app.database.prisma, b.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: b.tenant.id }]);
  });
  afterAll(async () => {
    await sql.end();
    await t.stop();
  });

  let nextA = 0;
  let nextB = 0;
  const nodeOfA = () => a.nodes[nextA++]!.id;
  const nodeOfB = () => b.nodes[nextB++]!.id;
  const retire = async (token: string, nodeId: string) => {
    const r = await gql(t.url, token, RETIRE, { i: { nodeId } });
    expect(r.errors).toBeUndefined();
  };
  /** An outbox row written straight to the table, as any writer's transaction would. */
  const publishRaw = (client: pg.Client | pg.PoolClient, tree: typeof a, type: string, n: number) =>
    client.query(
      `INSERT INTO event (type, tenant_id, site_id, pool_id, node_id, subject, payload)
       SELECT $1, $2, $3, $4, $5, 'raw-' || i, jsonb_build_object('i', i) FROM generate_series(1, $6::int) i`,
      [type, tree.tenant.id, tree.site.id, tree.pools[0]!.id, tree.nodes[39]!.id, n],
    );
  const headCursor = async () => (await sql.query(`SELECT COALESCE(max(seq), 0)::text AS c FROM event`)).rows[0].c as string;
  const waitSequenced = async () => {
    for (let i = 0; i < 200; i += 1) {
      const { rows } = await sql.query('SELECT count(*)::int AS n FROM event WHERE seq IS NULL');
      if (rows[0].n === 0) return;
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error('events were not sequenced');
  };

  it('graphql-ws (the library\'s own client): a verb\'s event arrives live, with a cursor', async () => {
    const client = wsClient(t.url, tokenA);
    const got = wsSubscribe(client, EVENTS, { filter: { types: ['node.provision.retiring', MARK] } });
    await mark(sql, a, [() => got.events]);
    const nodeId = nodeOfA();
    await retire(tokenA, nodeId);
    await until(() => withoutMarks(got.events).length === 1, 10000, 'the retiring event');
    got.events.splice(0, got.events.length, ...withoutMarks(got.events));
    expect(got.events[0]).toMatchObject({ type: 'node.provision.retiring', tenantId: a.tenant.id, nodeId, payload: { nodeId, verb: 'retire', to: 'retiring' } });
    expect(got.events[0].cursor).toMatch(/^\d+$/);
    got.stop();
    await client.dispose();
  });

  it('tenant isolation: a tenant-B subscriber never sees tenant A\'s events, over graphql-ws, GraphQL over SSE and REST SSE', async () => {
    const client = wsClient(t.url, tokenB);
    const overWs = wsSubscribe(client, EVENTS, {});
    const overSse = sseSubscribe(t.url, tokenB, EVENTS, {});
    const overRest = restStream(t.url, tokenB, '?channel=metal');
    const aSees = restStream(t.url, tokenA, '?channel=all');
    const seenByB = [() => overWs.events, () => overSse.events, () => overRest.messages.map((m) => m.data)];
    const seenByA = [() => aSees.messages.map((m) => m.data)];
    // Live before anything happens, so an event that leaked would be delivered.
    await mark(sql, b, seenByB);
    await mark(sql, a, seenByA);
    const nodesA = [nodeOfA(), nodeOfA()];
    for (const id of nodesA) await retire(tokenA, id);
    const nodeB = nodeOfB();
    await retire(tokenB, nodeB);
    // Committed after every retire: each stream that has its marker has had its chance at them all.
    await mark(sql, b, seenByB);
    await mark(sql, a, seenByA);
    // The retire workflows run (the engine's step events follow each retire): every event B sees
    // is B's, and of the retires only B's own.
    const retires = (list: any[]) => list.filter((e) => e.type === 'node.provision.retiring');
    for (const list of seenByB.map((events) => withoutMarks(events()))) {
      expect(retires(list).map((e) => e.nodeId)).toEqual([nodeB]);
      expect(list.every((e) => e.tenantId === b.tenant.id && e.nodeId === nodeB)).toBe(true);
    }
    const restB = overRest.messages.filter((m) => m.data.type !== MARK);
    expect(restB[0]).toMatchObject({ event: 'node.provision.retiring', id: restB[0]!.data.cursor });
    expect(retires(withoutMarks(seenByA[0]!())).map((e) => e.nodeId)).toEqual(nodesA);
    overWs.stop();
    overSse.stop();
    overRest.stop();
    aSees.stop();
    await client.dispose();
  });

  it('resuming with the last cursor gets exactly the missed events, once each, in order, across the replay/live seam', async () => {
    const first = await headCursor();
    await publishRaw(sql, a, 'node.test.before', 5);
    await waitSequenced();
    // Away: 300 events commit while nobody listens.
    await publishRaw(sql, a, 'node.test.away', 300);
    await waitSequenced();
    // Resume from `first` while a writer keeps committing: some events land in the replay, some at
    // the seam, some live.
    let writing = true;
    const writer = (async () => {
      let k = 0;
      while (writing && k < 60) {
        await publishRaw(sql, a, 'node.test.during', 5);
        k += 1;
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    const client = wsClient(t.url, tokenA);
    const got = wsSubscribe(client, EVENTS, { after: first, filter: { types: ['node.test.before', 'node.test.away', 'node.test.during', MARK] } });
    await new Promise((r) => setTimeout(r, 400));
    writing = false;
    await writer;
    await waitSequenced();
    const expected = (await sql.query(
      `SELECT seq::text AS cursor FROM event WHERE seq > $1 AND type IN ('node.test.before', 'node.test.away', 'node.test.during') ORDER BY seq`,
      [first],
    )).rows.map((r) => r.cursor);
    expect(expected.length).toBeGreaterThan(305);
    // A duplicate or a late straggler would come before this marker.
    await mark(sql, a, [() => got.events]);
    expect(withoutMarks(got.events).map((e) => e.cursor)).toEqual(expected);
    got.stop();
    await client.dispose();
  });

  it('a lost LISTEN connection costs nothing: events committed while it was down still arrive, and the hub listens again', async () => {
    const client = wsClient(t.url, tokenA);
    const got = wsSubscribe(client, EVENTS, { filter: { types: ['node.test.outage', MARK] } });
    await mark(sql, a, [() => got.events]);
    got.events.length = 0;
    // Cut the process's LISTEN connection (and its NOTIFYs) the way a network blip or failover would.
    const killed = await sql.query(`SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE application_name = 'metal-listen' AND datname = current_database()`);
    expect(killed.rows.length).toBeGreaterThan(0);
    await publishRaw(sql, a, 'node.test.outage', 7);
    await until(() => got.events.length === 7, 15000, 'the events committed during the outage');
    expect(new Set(got.events.map((e) => e.cursor)).size).toBe(7);
    expect(got.events.map((e) => Number(e.cursor))).toEqual([...got.events.map((e) => Number(e.cursor))].sort((x, y) => x - y));
    let listening = 0;
    for (let i = 0; i < 100 && !listening; i += 1) {
      listening = (await sql.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'metal-listen' AND datname = current_database()`)).rows[0].n;
      if (!listening) await new Promise((r) => setTimeout(r, 100));
    }
    expect(listening).toBe(1);
    got.stop();
    await client.dispose();
  });

  it('the platform\'s own events (the fabric\'s) reach a platform token of any grant, replayed and live, and no tenant\'s token', async () => {
    const reader = await makeToken(t.app.database.prisma, null, [{ permission: 'compute:sites:read', scopeType: 'platform', scopeId: null }]);
    await sql.query(`INSERT INTO event (type, tenant_id, subject, payload) VALUES ('fabric.config.updated', NULL, 'fabric-config', '{"mark": "platform-1"}')`);
    await waitSequenced();
    const platform = restStream(t.url, reader, '?channel=fabric&after=0');
    const tenant = restStream(t.url, tokenA, '?channel=fabric&after=0');
    const ws = wsClient(t.url, reader);
    const sub = wsSubscribe(ws, 'subscription ($j: ID!) { jobProgress(jobId: $j) { type payload } }', { j: 'fabric-config' });
    await until(() => platform.messages.some((m) => m.data.payload?.mark === 'platform-1'), 10000, 'the replayed platform event');
    await until(() => sub.events.length === 1, 10000, 'the replayed platform event over graphql-ws');
    await sql.query(`INSERT INTO event (type, tenant_id, subject, payload) VALUES ('fabric.config.updated', NULL, 'fabric-config', '{"mark": "platform-2"}')`);
    await until(() => platform.messages.some((m) => m.data.payload?.mark === 'platform-2'), 10000, 'the live platform event');
    await until(() => sub.events.length === 2, 10000, 'the live platform event over graphql-ws');
    expect(platform.messages.filter((m) => m.data.tenantId === null).every((m) => m.event === 'fabric_switch')).toBe(true);
    // The tenant's stream carries its own fabric events (the job test's), never the platform's.
    await new Promise((r) => setTimeout(r, 300));
    expect(tenant.messages.some((m) => m.data.tenantId === null)).toBe(false);
    platform.stop();
    tenant.stop();
    sub.stop();
    await ws.dispose();
  });

  it('jobProgress replays and follows the events of one job (the hook fabric and provisioning publish into)', async () => {
    const jobId = 'job_test_progress';
    await sql.query(
      `INSERT INTO event (type, tenant_id, site_id, subject, payload) VALUES ('fabric.apply.node', $1, $2, $3, '{"state": "node_started"}')`,
      [a.tenant.id, a.site.id, jobId],
    );
    await waitSequenced();
    const client = wsClient(t.url, tokenA);
    const got = wsSubscribe(client, 'subscription ($j: ID!) { jobProgress(jobId: $j) { type subject payload } }', { j: jobId });
    await until(() => got.events.length === 1, 10000, 'the replayed step');
    await sql.query(
      `INSERT INTO event (type, tenant_id, site_id, subject, payload) VALUES ('fabric.apply.node', $1, $2, $3, '{"state": "node_done"}')`,
      [a.tenant.id, a.site.id, jobId],
    );
    await until(() => got.events.length === 2, 10000, 'the live step');
    expect(got.events.map((e) => e.payload.state)).toEqual(['node_started', 'node_done']);
    // The REST channel for the fabric names them fabric_switch, as the seed's SSE channel does.
    const fabric = restStream(t.url, tokenA, '?channel=fabric&after=0');
    await until(() => fabric.messages.length >= 2, 10000, 'the fabric channel');
    expect(fabric.messages.map((m) => m.event)).toEqual(['fabric_switch', 'fabric_switch']);
    // Another tenant's token sees none of it.
    // It replays the job from the oldest retained event: B's own event of the job, committed after
    // A's, arrives only once A's have been weighed.
    const other = wsSubscribe(wsClient(t.url, tokenB), 'subscription ($j: ID!) { jobProgress(jobId: $j) { type tenantId payload } }', { j: jobId });
    await sql.query(
      `INSERT INTO event (type, tenant_id, site_id, subject, payload) VALUES ('fabric.apply.node', $1, $2, $3, '{"state": "b-marker"}')`,
      [b.tenant.id, b.site.id, jobId],
    );
    await until(() => other.events.length >= 1, 10000, 'B\'s own event of the job');
    expect(other.events).toEqual([{ type: 'fabric.apply.node', tenantId: b.tenant.id, payload: { state: 'b-marker' } }]);
    fabric.stop();
    got.stop();
    other.stop();
    await client.dispose();
  });

  it('REST SSE honours Last-Event-ID: a reconnect resumes after the last event received', async () => {
    const nodeId = nodeOfA();
    await retire(tokenA, nodeId);
    await waitSequenced();
    const mark = (await sql.query(`SELECT seq::text AS c FROM event WHERE node_id = $1 ORDER BY seq DESC LIMIT 1`, [nodeId])).rows[0].c;
    await publishRaw(sql, a, 'node.test.resume', 3);
    await waitSequenced();
    const stream = restStream(t.url, tokenA, '?channel=metal&after=0', { 'last-event-id': mark });
    await until(() => stream.messages.length >= 3, 10000, 'three events');
    expect(stream.messages.slice(0, 3).map((m) => m.event)).toEqual(['node.test.resume', 'node.test.resume', 'node.test.resume']);
    expect(BigInt(stream.messages[0]!.id!)).toBeGreaterThan(BigInt(mark));
    stream.stop();
  });

  it('a rolled-back transaction publishes nothing', async () => {
    const client = wsClient(t.url, tokenA);
    const got = wsSubscribe(client, EVENTS, { filter: { types: ['node.test.rollback', 'node.test.commit', MARK] } });
    await mark(sql, a, [() => got.events]);
    await sql.query('BEGIN');
    await publishRaw(sql, a, 'node.test.rollback', 3);
    await sql.query('ROLLBACK');
    // Committed after the rollback: anything the rolled-back rows had sent would come first.
    await publishRaw(sql, a, 'node.test.commit', 1);
    await until(() => withoutMarks(got.events).length >= 1, 10000, 'the committed event');
    expect(withoutMarks(got.events).map((e) => e.type)).toEqual(['node.test.commit']);
    got.stop();
    await client.dispose();
  });

  it('bad cursors are refused with a message naming after; a cursor older than retention is refused, not silently skipped', async () => {
    const client = wsClient(t.url, tokenA);
    const bad = wsSubscribe(client, EVENTS, { after: 'yesterday' });
    await until(() => bad.errors.length > 0 || bad.done, 5000, 'an error');
    expect(bad.errors[0].message).toMatch(/^after: is not a cursor/);
    expect(bad.errors[0].extensions?.code).toBe('INVALID_INPUT');
    const ahead = wsSubscribe(client, EVENTS, { after: '999999999999' });
    await until(() => ahead.errors.length > 0, 5000, 'an error');
    expect(ahead.errors[0].message).toMatch(/ahead of the stream/);
    const head = await headCursor();
    await sql.query('UPDATE event_horizon SET pruned_through = $1', [head]);
    try {
      const old = wsSubscribe(client, EVENTS, { after: '1' });
      await until(() => old.errors.length > 0, 5000, 'an error');
      expect(old.errors[0]).toMatchObject({ extensions: { code: 'INVALID_INPUT', details: { field: 'after', prunedThrough: head } } });
      expect(old.errors[0].message).toMatch(/older than the event retention/);
      const rest = restStream(t.url, tokenA, '?after=1');
      await until(() => rest.state.done, 5000, 'the refusal');
      expect(rest.state.status).toBe(400);
      expect(JSON.parse(rest.state.body).error).toMatchObject({ code: 'INVALID_INPUT' });
    } finally {
      await sql.query('UPDATE event_horizon SET pruned_through = 0');
    }
    await client.dispose();
  });

  it('retention: a scheduled pg-boss job prunes events older than EVENT_RETENTION_HOURS and moves the horizon', async () => {
    const schedule = (await sql.query(`SELECT cron FROM pgboss.schedule WHERE name = 'events.prune'`)).rows;
    expect(schedule).toEqual([{ cron: PRUNE_CRON }]);
    await publishRaw(sql, a, 'node.test.old', 4);
    await publishRaw(sql, a, 'node.test.recent', 2);
    await waitSequenced();
    await sql.query(`UPDATE event SET created_at = now() - interval '8 days' WHERE type = 'node.test.old'`);
    const oldest = (await sql.query(`SELECT max(seq)::text AS s FROM event WHERE type = 'node.test.old'`)).rows[0].s;
    const result = await pruneEvents(t.app.database.sql, 168);
    expect(result.deleted).toBe(4);
    expect(result.prunedThrough).toBe(oldest);
    expect((await sql.query(`SELECT count(*)::int AS n FROM event WHERE type = 'node.test.recent'`)).rows[0].n).toBe(2);
    expect((await sql.query(`SELECT pruned_through::text AS p FROM event_horizon`)).rows[0].p).toBe(oldest);
    // Pruning again finds nothing and never moves the horizon back.
    expect(await pruneEvents(t.app.database.sql, 168)).toEqual({ deleted: 0, prunedThrough: oldest });
    await sql.query('UPDATE event_horizon SET pruned_through = 0');
  });

  it('jobProgress without a cursor starts at the oldest retained event, also after pruning', async () => {
    const jobId = 'job_after_pruning';
    const head = await headCursor();
    await sql.query('UPDATE event_horizon SET pruned_through = $1', [head]);
    try {
      await sql.query(`INSERT INTO event (type, tenant_id, site_id, subject, payload) VALUES ('provision.step', $1, $2, $3, '{"step": "partition"}')`, [a.tenant.id, a.site.id, jobId]);
      await waitSequenced();
      const client = wsClient(t.url, tokenA);
      const got = wsSubscribe(client, 'subscription ($j: ID!) { jobProgress(jobId: $j) { payload } }', { j: jobId });
      await until(() => got.events.length === 1 || got.errors.length > 0, 10000, 'the step');
      expect(got.errors).toEqual([]);
      expect(got.events[0].payload).toEqual({ step: 'partition' });
      got.stop();
      await client.dispose();
    } finally {
      await sql.query('UPDATE event_horizon SET pruned_through = 0');
    }
  });

  it('events pruned while a replay is under way end it with the horizon, not with a silent gap', async () => {
    const hub = t.app.services.events!;
    const principal = await t.app.services.tokens.authenticate(tokenA);
    const from = await headCursor();
    await publishRaw(sql, a, 'node.test.long-replay', 600);
    await waitSequenced();
    // The replay runs up to what this process has read of the stream: until the hub has read the
    // 600 (its NOTIFY or its poll, slow on a busy machine), they would come live, past the prune.
    const last = BigInt(await headCursor());
    await until(() => (hub as unknown as { head: bigint }).head >= last, 10_000, 'the hub to read the 600 events');
    const sub = await hub.subscribe({ principal, token: tokenA, filter: { types: ['node.test.long-replay'] }, after: from });
    const first = (await sub.next()).value as any; // the first page (500) is read now
    expect(first.type).toBe('node.test.long-replay');
    const prunedTo = String(BigInt(from) + 550n);
    await sql.query('UPDATE event_horizon SET pruned_through = $1', [prunedTo]);
    try {
      let end: any;
      for (let i = 0; i < 700 && !end; i += 1) {
        const item = (await sub.next()).value as any;
        if (item && 'error' in item) end = item;
      }
      expect(end.error.code).toBe('INVALID_INPUT');
      expect(end.error.extensions.details).toMatchObject({ field: 'after', prunedThrough: prunedTo });
      expect((await sub.next()).done).toBe(true);
    } finally {
      // Closed even when this test fails, so the next ones do not wait for it to leave the hub.
      await sub.return();
      await sql.query('UPDATE event_horizon SET pruned_through = 0');
    }
  });

  it('a subscription closed by its client leaves the hub: graphql-ws, nodeUpdated, GraphQL over SSE and REST SSE', async () => {
    const hub = t.app.services.events!;
    await until(() => hub.subscriberCount === 0, 5000, 'earlier tests\' streams to close');
    const client = wsClient(t.url, tokenA);
    const streams = [
      wsSubscribe(client, EVENTS, {}),
      wsSubscribe(client, 'subscription ($id: ID!) { nodeUpdated(id: $id) { id } }', { id: a.nodes[38]!.id }),
      sseSubscribe(t.url, tokenA, EVENTS, {}),
    ];
    const rest = restStream(t.url, tokenA, '?channel=all');
    await until(() => hub.subscriberCount === 4, 5000, 'four open streams');
    for (const s of streams) s.stop();
    rest.stop();
    await until(() => hub.subscriberCount === 0, 5000, 'every stream to leave the hub');
    await client.dispose();
  });

  it('with no subscriber the hub moves its head past new events without reading them; a live stream opened after starts there, a resume still replays them', async () => {
    const hub = t.app.services.events!;
    await until(() => hub.subscriberCount === 0, 5000, 'earlier tests\' streams to close');
    const principal = await t.app.services.tokens.authenticate(tokenA);
    const from = await headCursor();
    const skippedBefore = hub.skipped;
    await publishRaw(sql, a, 'node.test.unwatched', 30);
    await waitSequenced();
    const last = await headCursor();
    // The sequencer's NOTIFY (or the poll) pumps the reader, which finds nobody to offer them to.
    await until(() => hub.skipped > skippedBefore, 5000, 'a read that skipped the unwatched events');
    const live = await hub.subscribe({ principal, token: tokenA, filter: { types: ['node.test.unwatched'] } });
    const resumed = await hub.subscribe({ principal, token: tokenA, filter: { types: ['node.test.unwatched'] }, after: from });
    try {
      expect(live.cursor).toBe(BigInt(last));
      await publishRaw(sql, a, 'node.test.unwatched', 1);
      await waitSequenced();
      // Live: only the event committed after it opened (a head left behind would hand it the 30).
      const first = (await live.next()).value as any;
      expect(first.payload).toEqual({ i: 1 });
      expect(first.seq).toBeGreaterThan(BigInt(last));
      // Resumed from before them: all 31, once each, in order.
      const got: any[] = [];
      while (got.length < 31) got.push((await resumed.next()).value);
      expect(got.map((e) => e.payload.i)).toEqual([...Array.from({ length: 30 }, (_, i) => i + 1), 1]);
      expect(got.map((e) => e.seq)).toEqual([...got.map((e) => e.seq)].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0)));
      expect(got[29].seq).toBe(BigInt(last));
    } finally {
      await live.return();
      await resumed.return();
    }
  });

  it('REST SSE refuses unknown channels and parameters, and a missing token', async () => {
    for (const [query, token, status, pattern] of [
      ['?channel=bogus', tokenA, 400, /query\.channel: must be one of metal, fabric, provision, all/],
      ['?chanel=metal', tokenA, 400, /query\.chanel: is not a known parameter/],
      ['', 'not-a-token', 401, /unknown, revoked or expired/],
    ] as const) {
      const s = restStream(t.url, token, query);
      await until(() => s.state.done, 5000, 'the refusal');
      expect(s.state.status).toBe(status);
      expect(JSON.parse(s.state.body).error.message).toMatch(pattern);
    }
  });

  it('a token revoked mid-stream ends the stream with UNAUTHENTICATED', async () => {
    const token = await makeToken(t.app.database.prisma, a.tenant.id, [{ permission: 'compute:sites:read', scopeType: 'tenant', scopeId: a.tenant.id }]);
    const client = wsClient(t.url, token);
    const got = wsSubscribe(client, EVENTS, {});
    const rest = restStream(t.url, token, '?channel=all');
    // Both streams are open and delivering before the revoke: this is mid-stream, not at the start.
    await mark(sql, a, [() => got.events, () => rest.messages.map((m) => m.data)]);
    await sql.query(`UPDATE api_token SET revoked_at = now() WHERE id = (SELECT id FROM api_token ORDER BY created_at DESC LIMIT 1)`);
    await until(() => got.errors.length > 0 && rest.messages.some((m) => m.event === 'error'), 10000, 'the streams to end');
    expect(got.errors[0].extensions?.code).toBe('UNAUTHENTICATED');
    expect(rest.messages.find((m) => m.event === 'error')!.data.code).toBe('UNAUTHENTICATED');
    got.stop();
    rest.stop();
    await client.dispose();
  });

  it('a subscriber that falls too far behind is closed with ABORTED and its last cursor; the others are not slowed', async () => {
    const hub = t.app.services.events!;
    const principal = await t.app.services.tokens.authenticate(tokenA);
    const slow = await hub.subscribe({ principal, token: tokenA, filter: { types: ['node.test.flood'] } });
    const fast = await hub.subscribe({ principal, token: tokenA, filter: { types: ['node.test.flood'] } });
    const fastGot: string[] = [];
    const draining = (async () => {
      for await (const item of fast) {
        if ('error' in item) throw item.error;
        fastGot.push(item.cursor);
        if (fastGot.length === 1005) break;
      }
    })();
    // The slow one reads two events, then stops reading.
    const one = await (async () => {
      await publishRaw(sql, a, 'node.test.flood', 2);
      const x = await slow.next();
      const y = await slow.next();
      return [x.value, y.value] as any[];
    })();
    await publishRaw(sql, a, 'node.test.flood', 1003);
    await draining;
    expect(fastGot).toHaveLength(1005);
    const end = (await slow.next()).value as any;
    expect(end.error.code).toBe('ABORTED');
    expect(end.error.extensions.details).toEqual({ lastCursor: one[1].cursor, reason: 'slow-consumer' });
    expect(end.error.message).toContain(`resume with after: "${one[1].cursor}"`);
    expect((await slow.next()).done).toBe(true);
  });

  it('nodeUpdated sends the current view, then the view after each change; another tenant\'s node is NOT_FOUND', async () => {
    const nodeId = nodeOfA();
    const client = wsClient(t.url, tokenA);
    const got = wsSubscribe(client, 'subscription ($id: ID!) { nodeUpdated(id: $id) { id provisionState version } }', { id: nodeId });
    await until(() => got.events.length === 1, 10000, 'the current view');
    expect(got.events[0]).toEqual({ id: nodeId, provisionState: 'ready', version: 1 });
    await retire(tokenA, nodeId);
    await until(() => got.events.length === 2, 10000, 'the change');
    expect(got.events[1]).toEqual({ id: nodeId, provisionState: 'retiring', version: 2 });
    const other = wsSubscribe(wsClient(t.url, tokenB), 'subscription ($id: ID!) { nodeUpdated(id: $id) { id } }', { id: nodeId });
    await until(() => other.errors.length > 0, 5000, 'NOT_FOUND');
    expect(other.errors[0].extensions?.code).toBe('NOT_FOUND');
    got.stop();
    await client.dispose();
  });

  it('workflowProgress streams a rescue run\'s events from the start', async () => {
    const deployed = b.nodes[30]!.id;
    await t.app.database.prisma.node.update({ where: { id: deployed }, data: { provisionState: 'deployed' } });
    const res = await gql(t.url, tokenB, 'mutation ($i: MetalNodeVerbInput!) { rescueNode(input: $i) { node { workflowId } } }', { i: { nodeId: deployed } });
    const runId = res.data!.rescueNode.node.workflowId;
    const client = wsClient(t.url, tokenB);
    const got = wsSubscribe(client, 'subscription ($r: ID!) { workflowProgress(runId: $r) { type payload } }', { r: runId });
    await until(() => got.events.length === 1, 10000, 'the rescue event');
    expect(got.events[0]).toMatchObject({ type: 'node.provision.rescue', payload: { workflowId: runId } });
    const forbidden = wsSubscribe(wsClient(t.url, tokenA), 'subscription ($r: ID!) { workflowProgress(runId: $r) { type } }', { r: runId });
    await until(() => forbidden.errors.length > 0, 5000, 'NOT_FOUND');
    expect(forbidden.errors[0].extensions?.code).toBe('NOT_FOUND');
    got.stop();
    await client.dispose();
  });
});

describe('the event stream across processes', () => {
  it('a stream needs a token, and open streams do not hold up a shutdown', async () => {
    const app = await startTestApp({ shutdownTimeoutMs: 10000 });
    const tree = await makeTenantTree(app.app.database.prisma, 'shutdown', { pools: 1, nodesPerPool: 1 });
    const token = await makeToken(app.app.database.prisma, tree.tenant.id, [{ permission: 'compute:sites:read', scopeType: 'tenant', scopeId: tree.tenant.id }]);
    const anonymous = wsSubscribe(wsClient(app.url, null), EVENTS, {});
    await until(() => anonymous.errors.length > 0, 5000, 'UNAUTHENTICATED');
    expect(anonymous.errors[0].extensions?.code).toBe('UNAUTHENTICATED');
    const client = wsClient(app.url, token);
    const ws = wsSubscribe(client, EVENTS, {});
    const sse = restStream(app.url, token, '?channel=all');
    await mark(app.app.database.pool, tree, [() => ws.events, () => sse.messages.map((m) => m.data)]);
    const started = Date.now();
    await app.stop();
    expect(Date.now() - started).toBeLessThan(5000);
    await until(() => ws.done && sse.state.done, 5000, 'both streams to end');
    await client.dispose();
  });


  it('two service processes on one database: a mutation through A reaches a subscriber on B', async () => {
    const databaseUrl = await createTestDatabase();
    const [one, two] = await Promise.all([startTestApp({ databaseUrl, role: 'api' }), startTestApp({ databaseUrl, role: 'api' })]);
    try {
      const tree = await makeTenantTree(one.app.database.prisma, 'two-procs', { pools: 1, nodesPerPool: 1 });
      const token = await makeToken(one.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
      const client = wsClient(two.url, token);
      const got = wsSubscribe(client, EVENTS, {});
      await mark(one.app.database.pool, tree, [() => got.events]);
      const r = await gql(one.url, token, RETIRE, { i: { nodeId: tree.nodes[0]!.id } });
      expect(r.errors).toBeUndefined();
      await until(() => withoutMarks(got.events).length === 1, 10000, 'the event on B');
      expect(withoutMarks(got.events)[0]).toMatchObject({ type: 'node.provision.retiring', nodeId: tree.nodes[0]!.id });
      got.stop();
      await client.dispose();
    } finally {
      await Promise.all([one.stop(), two.stop()]);
    }
  });
});

describe('the event stream when the publishing process dies', () => {
  it('killing the publishing process right after commit loses nothing', async () => {
    const databaseUrl = await createTestDatabase();
    // The publisher is the built service in its own process, with its own sequencer.
    const port = 27000 + Math.floor(Math.random() * 1000); // below the ephemeral range (32768+), apart from the other suites
    const adminToken = `kill-admin-${Date.now()}`;
    const child = spawn(process.execPath, [fromRoot('dist', 'src', 'main.js')], {
      env: { ...process.env, DATABASE_URL: databaseUrl, PORT: String(port), ADMIN_TOKEN: adminToken, LOG_LEVEL: 'warn', ROLE: 'api', SECRET_KEY: Buffer.alloc(32, 7).toString('base64') },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const childUrl = `http://127.0.0.1:${port}`;
    let receiver: TestApp | undefined;
    try {
      for (let i = 0; ; i += 1) {
        if (i > 150) throw new Error(`publisher not ready: ${stderr}`);
        const ok = await fetch(`${childUrl}/readyz`).then((r) => r.ok, () => false);
        if (ok) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      receiver = await startTestApp({ databaseUrl, role: 'api' });
      expect(receiver.app.services.events).not.toBeNull();
      const tree = await makeTenantTree(receiver.app.database.prisma, 'killed', { pools: 1, nodesPerPool: 1 });
      const token = await makeToken(receiver.app.database.prisma, tree.tenant.id, [{ permission: 'compute:nodes:provision', scopeType: 'tenant', scopeId: tree.tenant.id }]);
      const client = wsClient(receiver.url, token);
      const got = wsSubscribe(client, EVENTS, {});
      await mark(receiver.app.database.pool, tree, [() => got.events]);
      // The verb commits in the publisher; it is killed the moment its answer arrives.
      const exited = new Promise((resolve) => child.once('exit', resolve));
      const answer = await gql(childUrl, token, RETIRE, { i: { nodeId: tree.nodes[0]!.id } });
      child.kill('SIGKILL');
      await exited;
      expect(answer.errors).toBeUndefined();
      await until(() => withoutMarks(got.events).length === 1, 15000, 'the event, numbered by the surviving process');
      expect(withoutMarks(got.events)[0]).toMatchObject({ type: 'node.provision.retiring', nodeId: tree.nodes[0]!.id });
      got.stop();
      await client.dispose();
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await receiver?.stop();
    }
  });
});
