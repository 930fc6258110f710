import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TokenStore } from '../auth/tokens';
import { bearerToken } from '../auth/tokens';
import { AppError, HTTP_STATUS, invalidInput, unauthenticated } from '../errors';
import { sendError } from '../http/respond';
import { LIMITS, checkString } from '../limits';
import { isStreamEnd, type EventHub, type StreamEvent } from './hub';

/**
 * The REST event stream for existing tooling: `GET /api/events?channel=<channel>&after=<cursor>`,
 * Server-Sent Events. Each event carries `id: <cursor>`, so a client that reconnects with
 * `Last-Event-ID` (EventSource does) resumes exactly after the last event it received.
 * Channels follow the seed's SSE channels: `metal` (node.* events, named by their type),
 * `fabric` (event name `fabric_switch`), `provision` (event name `provision_step`), or `all`.
 */
export const CHANNELS: Record<string, { prefixes: string[]; name: (e: StreamEvent) => string }> = {
  metal: { prefixes: ['node.'], name: (e) => e.type },
  fabric: { prefixes: ['fabric.'], name: () => 'fabric_switch' },
  provision: { prefixes: ['provision.'], name: () => 'provision_step' },
  all: { prefixes: [], name: (e) => e.type },
};

const PING_MS = 15000;

export function sseData(e: StreamEvent): string {
  return JSON.stringify({
    cursor: e.cursor,
    type: e.type,
    tenantId: e.tenantId,
    siteId: e.siteId,
    poolId: e.poolId,
    nodeId: e.nodeId,
    subject: e.subject,
    payload: e.payload,
    createdAt: e.createdAt.toISOString(),
  });
}

export async function serveEventStream(
  deps: { events: EventHub | null; tokens: TokenStore },
  req: IncomingMessage,
  res: ServerResponse,
  requestId: string,
): Promise<void> {
  // The client may leave during the awaits below: know it from the start, not from when the
  // stream begins, or a stream nobody reads would be opened and never closed.
  const closed = new Promise<void>((resolve) => res.once('close', resolve));
  try {
    if (req.method !== 'GET') {
      res.setHeader('allow', 'GET');
      return sendError(res, 405, 'INVALID_INPUT', 'this method is not allowed here; use GET', requestId);
    }
    if (!deps.events) throw new AppError('INVALID_CONFIG', 'this process serves no event streams (ROLE=worker)');
    const token = bearerToken(req.headers.authorization);
    if (!token) throw unauthenticated();
    const principal = await deps.tokens.authenticate(token);
    const url = new URL(req.url ?? '/', 'http://internal');
    for (const key of url.searchParams.keys()) {
      if (!['channel', 'after', 'nodeId'].includes(key)) throw invalidInput(`query.${key}`, 'is not a known parameter (channel, after, nodeId)');
    }
    const channelName = url.searchParams.get('channel') ?? 'metal';
    const channel = CHANNELS[channelName];
    if (!channel) throw invalidInput('query.channel', `must be one of ${Object.keys(CHANNELS).join(', ')}`);
    const lastEventId = req.headers['last-event-id'];
    // A reconnecting EventSource sends Last-Event-ID: it is newer than the URL's `after`.
    const after = typeof lastEventId === 'string' && lastEventId !== '' ? lastEventId : url.searchParams.get('after');
    const nodeId = url.searchParams.get('nodeId');
    const badNodeId = nodeId === null ? null : checkString('query.nodeId', nodeId, LIMITS.id);
    if (badNodeId) throw badNodeId;
    const sub = await deps.events.subscribe({
      principal,
      token,
      filter: { typePrefixes: channel.prefixes, nodeId },
      after,
    });
    if (res.destroyed) {
      await sub.return();
      return;
    }

    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    res.flushHeaders();
    res.write(': metal event stream\nretry: 2000\n\n');
    const ping = setInterval(() => {
      if (!res.writableNeedDrain) res.write(': ping\n\n');
    }, PING_MS);
    void closed.then(() => sub.return());
    try {
      for await (const item of sub) {
        if (isStreamEnd(item)) {
          const { code, message, extensions } = item.error;
          res.write(`event: error\ndata: ${JSON.stringify({ code, message, requestId, ...(extensions.details ? { details: extensions.details } : {}) })}\n\n`);
          break;
        }
        const ok = res.write(`id: ${item.cursor}\nevent: ${channel.name(item)}\ndata: ${sseData(item)}\n\n`);
        // Stop pulling while the socket is full: the subscription's bounded buffer then decides.
        if (!ok) await Promise.race([new Promise((resolve) => res.once('drain', resolve)), closed]);
        if (res.destroyed) break;
      }
    } finally {
      clearInterval(ping);
      await sub.return();
      res.end();
    }
  } catch (error) {
    if (res.headersSent) throw error;
    if (error instanceof AppError) return sendError(res, HTTP_STATUS[error.code], error.code, error.message, requestId, error.extensions.details as Record<string, unknown> | undefined);
    throw error;
  }
}
