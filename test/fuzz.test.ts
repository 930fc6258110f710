import fs from 'node:fs';
import path from 'node:path';
import fc from 'fast-check';
import { buildClientSchema, buildSchema, getIntrospectionQuery, type IntrospectionQuery } from 'graphql';
import { routes } from '../src/rest/routes';
import { openApiDocument } from '../src/rest/openapi';
import { startTestApp, type TestApp } from './helpers/app';
import { closeAgent, send, type RawRequest } from './helpers/fuzz/http';
import { Findings, Fingerprint, judge, LogCapture, redact } from './helpers/fuzz/oracle';
import { anonymousOnRoute, restCaseArb, restRequest, restTargets, type RestTarget } from './helpers/fuzz/rest';
import { envelopeCaseArb, envelopeRequest, graphqlCaseArb, graphqlRequest, graphqlValidCaseArb, graphqlTargets, type GraphqlTarget } from './helpers/fuzz/graphql';
import { buildWorld, type World } from './helpers/fuzz/world';
import { summarize } from './helpers/fuzz/values';
import { knownCases } from './helpers/fuzz/known';

/**
 * Property-based fuzzing of every REST route of /openapi.json and every root field of the GraphQL
 * schema: valid-ish inputs made from the schemas, then mutated (fields left out, wrong types,
 * extra keys, NUL, lone surrogates, invalid UTF-8, 100 KB strings, 10,000-deep nesting, huge
 * arrays, numbers out of range, malformed JSON, wrong content types, hostile path and query
 * parameters), sent as the platform admin, a tenant, a reader, an agent, nobody or garbage.
 *
 * Every answer must be below 500, in the error shape with a code of the vocabulary (never
 * INTERNAL), echo no secret (response or log line), and a refusal must leave every row as it was.
 *
 * FUZZ_SEED (default fixed) and FUZZ_RUNS (cases per target) change the run; FUZZ_PATH (with -t)
 * replays one counterexample; FUZZ_COLLECT=1 keeps going after a violation and FUZZ_REPORT=<file>
 * appends every distinct finding to that file, grouped by cause; FUZZ_STATS=1 prints request counts
 * and outcomes; FUZZ_LOG_LEVEL (default debug) is the level of the captured service log.
 */
const SEED = Number(process.env.FUZZ_SEED ?? 20261201);
const RUNS = Number(process.env.FUZZ_RUNS ?? 8);
const COLLECT = process.env.FUZZ_COLLECT === '1';
const REPORT = process.env.FUZZ_REPORT;

// Test names come from the same sources the service serves; beforeAll checks the running service agrees.
const REST_NAMES = restTargets(openApiDocument(routes, '0')).map((t) => t.name);
const GRAPHQL_NAMES = graphqlTargets(buildSchema(fs.readFileSync(path.join(__dirname, '..', 'schema', 'schema.graphql'), 'utf8'))).map((t) => t.name);

let t: TestApp;
let world: World;
let fingerprint: Fingerprint;
let base: URL;
let last: Record<string, string> | null = null;
const logs = new LogCapture();
const findings = new Findings();
const rest = new Map<string, RestTarget>();
const graphql = new Map<string, GraphqlTarget>();

beforeAll(async () => {
  // No workers: a reconciler finishing a verb's job would change rows between two requests.
  t = await startTestApp({ role: 'api' }, { log: logs.logger });
  base = new URL(t.url);
  world = await buildWorld(t);
  fingerprint = await Fingerprint.open(t.app.databaseUrl);
  const doc = (await (await fetch(`${t.url}/openapi.json`)).json()) as Record<string, unknown>;
  for (const target of restTargets(doc)) rest.set(target.name, target);
  const introspection = await fetch(`${t.url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${t.adminToken}` },
    body: JSON.stringify({ query: getIntrospectionQuery() }),
  }).then((r) => r.json() as Promise<{ data: IntrospectionQuery }>);
  for (const target of graphqlTargets(buildClientSchema(introspection.data))) graphql.set(target.name, target);
}, 60_000);

const stats = { requests: 0, fingerprintMs: 0, sendMs: 0, outcomes: {} as Record<string, number> };
afterAll(async () => {
  if (process.env.FUZZ_STATS) console.log(JSON.stringify(stats));
  if (REPORT) findings.write(REPORT, `fuzz run ${new Date().toISOString()} seed ${SEED} runs ${RUNS}`);
  closeAgent();
  await fingerprint?.close();
  await t?.stop();
});

let knownOnce: ReturnType<typeof knownCases> | undefined;
const known = () => (knownOnce ??= knownCases(world));

/** A seed per target, all derived from FUZZ_SEED, so one target's failure replays alone. */
const seedOf = (name: string) => [...name].reduce((h, ch) => (Math.imul(h, 31) + ch.charCodeAt(0)) | 0, SEED);

interface Sent {
  target: string;
  face: 'rest' | 'graphql';
  subscription?: boolean;
  request: RawRequest;
  anonymousOnRoute: boolean;
  input: string;
  sample: unknown;
}

/**
 * Sends one case (or several at once, for races) and judges each answer; a violation throws
 * (fast-check then reports the case) unless collecting. Sent together, the cases share one
 * before/after fingerprint: it must be unchanged only when every one of them was refused.
 */
async function exercise(cases: Sent | Sent[]): Promise<void> {
  const list = Array.isArray(cases) ? cases : [cases];
  const t0 = performance.now();
  const before = last ?? (await fingerprint.take());
  const mark = logs.mark();
  const t1 = performance.now();
  const responses = await Promise.all(list.map((sent) => send(base, sent.request)));
  // The request's 'finish' log line is written after the response leaves.
  await new Promise((resolve) => setImmediate(resolve));
  const t2 = performance.now();
  const after = await fingerprint.take();
  stats.requests += list.length;
  stats.fingerprintMs += t1 - t0 + performance.now() - t2;
  stats.sendMs += t2 - t1;
  last = after;
  const verdicts = list.map((sent, i) =>
    judge({
      face: sent.face,
      method: sent.request.method,
      subscription: sent.subscription,
      response: responses[i]!,
      anonymousOnRoute: sent.anonymousOnRoute,
      logLines: logs.since(mark),
      before,
      after,
      secrets: world.secrets,
    }),
  );
  if (verdicts.some((v) => !v.refused)) {
    // One of them changed rows legitimately: the others' refusals cannot be told apart from it.
    for (const v of verdicts) v.violations = v.violations.filter((x) => x.kind !== 'row changed after a refusal');
  }
  const problems: string[] = [];
  list.forEach((sent, i) => {
    const verdict = verdicts[i]!;
    const response = responses[i]!;
    const outcome = `${sent.face} ${response.status} ${verdict.refused ? verdict.code ?? 'refused' : 'ok'}`;
    stats.outcomes[outcome] = (stats.outcomes[outcome] ?? 0) + 1;
    for (const v of verdict.violations) findings.add(sent.target, sent.input, verdict, v, sent.sample, world.secrets);
    if (!verdict.violations.length) return;
    problems.push(
      ...verdict.violations.map((v) => `${v.kind}: ${redact(v.detail, world.secrets)}`),
      `input: ${sent.input}`,
      `request: ${sent.request.method} ${String(summarize(sent.request.path))}${list.length > 1 ? ` (${list.length} sent at once)` : ''}`,
      `response: ${response.status} ${redact(response.body.toString('utf8'), world.secrets).slice(0, 400)}`,
      ...verdict.errorLogs.slice(0, 2).map((l) => `log: ${redact(l, world.secrets).slice(0, 400)}`),
    );
  });
  if (problems.length && !COLLECT) throw new Error(problems.join('\n'));
}

async function check<T>(name: string, arb: fc.Arbitrary<T>, run: (value: T) => Promise<void>, runs = RUNS, examples: T[] = []) {
  const seed = seedOf(name);
  const details = await fc.check(fc.asyncProperty(arb, run), {
    seed,
    numRuns: runs + examples.length,
    examples: examples.map((e): [T] => [e]),
    // Shrinking would resend dozens of near-identical requests; the first counterexample is printed as is.
    endOnFailure: true,
    ...(process.env.FUZZ_PATH ? { path: process.env.FUZZ_PATH } : {}),
  });
  if (details.failed) {
    const example = details.counterexample?.[0];
    const error = details.errorInstance instanceof Error ? details.errorInstance.message : String(details.errorInstance);
    throw new Error(
      `${name}: ${error}\n\ncase: ${redact(JSON.stringify(summarize(example)), world.secrets)}\n\n` +
        `replay: FUZZ_SEED=${SEED} FUZZ_PATH=${details.counterexamplePath} npx jest test/fuzz.test.ts -t '${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$' (seed of this target ${seed})`,
    );
  }
  if (COLLECT) {
    const mine = findings.list().filter((f) => f.target === name);
    if (mine.length) throw new Error(`${name}: ${mine.length} distinct violations:\n` + mine.map((f) => `- ${f.kind} ${f.status} ${f.code ?? ''} ${f.message.slice(0, 160)} (${f.inputs.join(' / ')})`).join('\n'));
  }
}

describe('fuzz', () => {
  it('covers every route of the running /openapi.json and every root field of its GraphQL schema', () => {
    expect([...rest.keys()].sort()).toEqual([...REST_NAMES].sort());
    expect([...graphql.keys()].sort()).toEqual([...GRAPHQL_NAMES].sort());
    expect(rest.size).toBeGreaterThan(20);
    expect(graphql.size).toBeGreaterThan(30);
  });

  it('its database fingerprint sees a changed row, a new secret and a queued job', async () => {
    const prisma = t.app.services.prisma;
    const before = await fingerprint.take();
    await prisma.site.update({ where: { id: world.ids.theirs.site![0]! }, data: { name: 'fuzz-b-site-renamed' } });
    const renamed = await fingerprint.take();
    expect(Object.keys(before).filter((k) => before[k] !== renamed[k])).toEqual(['site']);
    await t.app.services.secrets!.put(null, { username: 'u', password: 'p' });
    await t.app.queues.send('metal.batch', { batchId: 'batch_fingerprint_check' });
    const after = await fingerprint.take();
    expect(Object.keys(after).filter((k) => renamed[k] !== after[k]).sort()).toEqual(['pgboss.job', 'secret']);
    last = null;
  });

  it('its judge refuses a 5xx, INTERNAL, a bare 4xx, an echoed secret, a changed row and an anonymous 400', () => {
    const answer = (status: number, body: unknown, headers = {}) => ({ status, headers, body: Buffer.from(JSON.stringify(body)), streamed: false });
    const error = (code: string) => ({ error: { code, message: 'm', requestId: 'r' } });
    const base = { face: 'rest' as const, method: 'POST', anonymousOnRoute: false, logLines: [], before: { node: '1' }, after: { node: '1' }, secrets: ['tok-secret'] };
    const kinds = (o: Partial<Parameters<typeof judge>[0]>) => judge({ ...base, response: answer(400, error('INVALID_INPUT')), ...o }).violations.map((v) => v.kind);
    expect(kinds({})).toEqual([]);
    expect(kinds({ response: answer(500, error('INTERNAL')) })).toEqual(['5xx']);
    expect(kinds({ response: answer(400, error('INTERNAL')) })).toEqual(['INTERNAL code', 'status does not match code']);
    expect(kinds({ response: answer(400, { message: 'no shape' }) })).toEqual(['error shape']);
    expect(kinds({ response: answer(404, error('INVALID_INPUT')) })).toEqual(['status does not match code']);
    expect(kinds({ response: answer(400, { error: { code: 'INVALID_INPUT', message: 'FuzzSecretAbc', requestId: 'r' } }) })).toEqual(['secret in response']);
    expect(kinds({ logLines: ['{"msg":"Bearer tok-secret"}'] })).toEqual(['secret in log']);
    expect(kinds({ after: { node: '2' } })).toEqual(['row changed after a refusal']);
    expect(kinds({ anonymousOnRoute: true })).toEqual(['anonymous not 401']);
    expect(kinds({ face: 'graphql', response: answer(200, { errors: [{ message: 'x', extensions: { code: 'INTERNAL' } }] }) })).toEqual(['INTERNAL code']);
    expect(kinds({ face: 'graphql', response: answer(200, { errors: [{ message: 'x' }] }), after: { node: '2' } })).toEqual(['error shape', 'row changed after a refusal']);
    expect(kinds({ face: 'graphql', response: answer(200, { data: { a: 1 } }), after: { node: '2' } })).toEqual([]);
  });

  describe('REST', () => {
    it.each(REST_NAMES)('%s', async (name) => {
      const target = rest.get(name)!;
      await check(name, restCaseArb(target, world), (c) =>
        exercise({
          target: name,
          face: 'rest',
          request: restRequest(target, c, world),
          anonymousOnRoute: anonymousOnRoute(target, c),
          input: c.input,
          sample: c,
        }),
        target.body ? RUNS * 2 : RUNS,
        known().rest[name],
      );
    }, 120_000);
  });

  describe('GraphQL', () => {
    it.each(GRAPHQL_NAMES)('%s', async (name) => {
      const target = graphql.get(name)!;
      await check(name, graphqlCaseArb(target, world), (c) =>
        exercise({
          target: name,
          face: 'graphql',
          subscription: target.operation === 'subscription',
          request: graphqlRequest(target, c, world),
          anonymousOnRoute: false,
          input: c.input,
          sample: c,
        }),
        target.operation === 'mutation' ? RUNS * 2 : RUNS,
        known().graphql[name],
      );
    }, 120_000);

    // Check-then-insert races: the same valid create sent twice at once is one success and one
    // CONFLICT (or two refusals), never INTERNAL.
    const CREATES = GRAPHQL_NAMES.filter((n) => /^mutation (create|register|save|enroll)/.test(n));
    it.each(CREATES)('%s, twice at once', async (name) => {
      const target = graphql.get(name)!;
      await check(`${name}, twice at once`, graphqlValidCaseArb(target, world), (c) => {
        const sent: Sent = { target: `${name}, twice at once`, face: 'graphql', request: graphqlRequest(target, c, world), anonymousOnRoute: false, input: `race: ${c.input}`, sample: c };
        return exercise([sent, sent]);
      }, Math.ceil(RUNS / 2), known().races[name]);
    }, 120_000);

    it('malformed requests to /graphql', async () => {
      await check('graphql envelope', envelopeCaseArb(), (c) =>
        exercise({ target: `graphql envelope`, face: 'graphql', subscription: c.label.startsWith('subscription'), request: envelopeRequest(c, world), anonymousOnRoute: false, input: c.label, sample: { label: c.label, actor: c.actor } }),
        RUNS * 3,
        known().envelope,
      );
    }, 120_000);
  });
});
