import type { Context } from '../../context';
import { requirePrincipal } from '../../context';
import { decide } from '../../auth/decide';
import { AppError, ERROR_CODES, invalidInput, type ErrorCode } from '../../errors';
import { publish } from '../../events/outbox';
import type { Tx } from '../../db/client';
import type { PrismaClient } from '../../generated/prisma/client';
import { uuidv7 } from '../../ids';
import { listComputeNodes } from './compute-nodes';
import { checkOverrideNodes, PREFLIGHT_ID, validatePreflightInput, vtepPoolView, type PreflightInput, type PreflightMode, type PreflightResult } from './preflight';
import { fabricRunId, startRun } from './runs';

/**
 * The preflight's request side: every input rule first (nothing is contacted before the input is
 * known good), then a `fabric-preflight` workflow run (jobs/workflows/fabric-preflight.ts) does
 * the SSH scan and records the findings; the request answers with them when the run ends. Needs
 * platform admin: it contacts every node, pins host keys and writes the consensus the config is
 * checked against.
 */

/** The preflight run's step whose memo holds the answer. */
export const PREFLIGHT_RESULT_STEP = 1;
/**
 * How long a request waits for its run: past the scan of the largest cluster (a node's budget is
 * 10 s, 32 at a time). A run not over by then (no worker running the engine) is an error that
 * names it; it still records its findings when a worker takes it.
 */
const WAIT_MS = 10 * 60_000;

export async function runPreflight(ctx: Context, input: PreflightInput): Promise<PreflightResult> {
  decide(requirePrincipal(ctx), 'admin', { type: 'platform' });
  const v = validatePreflightInput(input);
  const nodes = await listComputeNodes(ctx.prisma);
  checkOverrideNodes(v.overrides, nodes);
  const stored = await ctx.prisma.fabricConfig.findUnique({
    where: { id: 1 }, select: { expectedNodes: true, routerIdBase: true, routerIdPrefixLen: true },
  });
  const routerIdBase = v.routerIdBase ?? stored?.routerIdBase ?? '';
  const routerIdPrefixLen = v.routerIdPrefixLen ?? stored?.routerIdPrefixLen ?? 0;
  if ((routerIdBase === '') !== (routerIdPrefixLen === 0)) {
    throw invalidInput(routerIdBase === '' ? 'input.routerIdBase' : 'input.routerIdPrefixLen',
      'the VTEP pool needs both a base and a prefix length (from the input or the stored fabric config)');
  }
  const vtepPool = vtepPoolView(routerIdBase, routerIdPrefixLen, v.expectedNodes ?? stored?.expectedNodes ?? 0);
  const id = uuidv7();
  const runId = fabricRunId(id);
  await ctx.prisma.$transaction((tx) => startRun(tx, {
    id: runId, subject: `fabric:preflight:${id}`, kind: 'fabric-preflight',
    params: { underlay: v.underlay, overrides: v.overrides, vtepPool },
  }));
  return awaitPreflight(ctx.prisma, runId);
}

const isErrorCode = (code: unknown): code is ErrorCode => typeof code === 'string' && (ERROR_CODES as readonly string[]).includes(code);

/** The run's answer once it ended: its findings, or its failure as the error it was. */
async function awaitPreflight(prisma: PrismaClient, runId: string): Promise<PreflightResult> {
  const until = Date.now() + WAIT_MS;
  for (let pause = 10; ; pause = Math.min(100, pause * 2)) {
    const [row] = await prisma.$queryRawUnsafe<{ status: string; code: string | null; message: string | null; result: PreflightResult | null }[]>(
      `SELECT w.status, w.last_error_code AS code, w.last_error_message AS message, s.state->'memo'->'result' AS result
         FROM workflow_run w LEFT JOIN workflow_step s ON s.run_id = w.id AND s.idx = $2
        WHERE w.id = $1`, runId, PREFLIGHT_RESULT_STEP);
    if (row?.status === 'succeeded' && row.result) return row.result;
    if (!row || ['failed', 'aborted', 'superseded'].includes(row.status)) {
      throw new AppError(isErrorCode(row?.code) ? row.code : 'INTERNAL', row?.message ?? 'the preflight run is gone');
    }
    if (Date.now() > until) {
      throw new AppError('UPSTREAM_UNAVAILABLE', `the preflight run ${runId} did not end within ${WAIT_MS / 1000} s: is a worker running the workflow engine?`);
    }
    await new Promise((resolve) => setTimeout(resolve, pause));
  }
}

/** The findings, the capability and the event, in the caller's transaction (the run's last). */
export async function recordPreflight(tx: Tx, result: PreflightResult): Promise<void> {
  const data = {
    underlayCidr: result.underlayCidr,
    underlayMtu: result.underlayMtu,
    mtuDrift: result.mtuDrift.map((d) => ({ ...d })),
    ready: result.ready,
    nodeCount: result.nodes.length,
    at: new Date(),
    // No node answered: the earlier finding stands.
    ...(result.frrHmacShaCapable === null ? {} : { frrHmacShaCapable: result.frrHmacShaCapable }),
  };
  await tx.fabricPreflight.upsert({ where: { id: PREFLIGHT_ID }, create: { id: PREFLIGHT_ID, ...data }, update: data });
  if (result.frrHmacShaCapable !== null) {
    await tx.fabricConfig.updateMany({ where: { id: 1 }, data: { frrHmacShaCapable: result.frrHmacShaCapable } });
  }
  const count = (mode: PreflightMode) => result.nodes.filter((n) => n.mode === mode).length;
  await publish(tx, {
    type: 'fabric.preflight.completed',
    tenantId: null,
    subject: 'fabric-config',
    payload: {
      underlayCidr: result.underlayCidr, ready: result.ready, nodes: result.nodes.length, reuse: count('reuse'),
      override: count('override'), needsOverride: count('needs_override'), unreachable: count('unreachable'),
      underlayMtu: result.underlayMtu, mtuDrift: result.mtuDrift.length, frrHmacShaCapable: result.frrHmacShaCapable,
    },
  });
}
