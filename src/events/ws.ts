import type { IncomingMessage, Server } from 'node:http';
import { randomUUID } from 'node:crypto';
import { WebSocketServer, type WebSocket } from 'ws';
import { CloseCode, handleProtocols, makeServer, type ServerOptions } from 'graphql-ws';
import { GraphQLError, type ExecutionArgs } from 'graphql';
import type { Logger } from 'pino';
import { isIntrospectionOnly, withCode, withRequestId, type GraphqlServer } from '../graphql/yoga';
import { unauthenticated } from '../errors';
import { checkDocumentNesting } from '../graphql/input-check';
import type { Context } from '../context';

const KEEPALIVE_MS = 12000;

const corked = new WeakSet<WebSocket>();

/**
 * Holds the socket's writes until the end of this turn of the event loop: the frames a burst of
 * events produces for one subscriber leave in one system call instead of one each.
 */
function corkForThisTurn(ws: WebSocket): void {
  const tcp = (ws as unknown as { _socket?: import('node:net').Socket })._socket;
  if (!tcp || corked.has(ws)) return;
  corked.add(ws);
  tcp.cork();
  setImmediate(() => {
    corked.delete(ws);
    tcp.uncork();
  });
}

interface Extra extends Record<PropertyKey, unknown> {
  socket: WebSocket;
  request: IncomingMessage;
  /** Each running operation's request id, by its graphql-ws id: its errors carry it (onError). */
  requestIds: Map<string, string>;
}

interface EnvelopedRoot {
  execute: (args: ExecutionArgs) => unknown;
  subscribe: (args: ExecutionArgs) => unknown;
}

/**
 * graphql-ws on the HTTP server, at /graphql (the protocol `graphql-transport-ws`). Every operation
 * goes through Yoga's envelop (limits, error masking, the same context), authenticated by the
 * `authorization` connection parameter (browsers cannot set headers on a WebSocket) or the upgrade
 * request's Authorization header.
 */
export function attachGraphqlWs(server: Server, yoga: GraphqlServer, log: Logger): { close(): Promise<void> } {
  const wss = new WebSocketServer({ noServer: true, maxPayload: 1024 * 1024 });
  server.on('upgrade', (req, socket, head) => {
    const path = new URL(req.url ?? '/', 'http://internal').pathname;
    if (path !== '/graphql') {
      socket.end('HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\n');
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => wss.emit('connection', ws, req));
  });

  const authorizationOf = (connectionParams: Record<string, unknown> | undefined, request: IncomingMessage): string | undefined => {
    const given = connectionParams?.authorization ?? connectionParams?.Authorization;
    return typeof given === 'string' ? given : request.headers.authorization;
  };

  const options: ServerOptions<Record<string, unknown> | undefined, Extra> = {
    // A token is checked at connection_init: one that is malformed, unknown, revoked or expired
    // refuses the connection (4403 Forbidden) before any operation. Without a token the
    // connection opens, as GraphQL over HTTP does, and every operation but introspection is
    // UNAUTHENTICATED. Each operation authenticates again (a token revoked later ends its streams).
    onConnect: async (ctx) => {
      const authorization = authorizationOf(ctx.connectionParams, ctx.extra.request);
      if (!authorization) return true;
      const request = new Request('http://internal/graphql', { headers: { authorization } });
      try {
        const enveloped = yoga.getEnveloped({ request, requestId: randomUUID(), params: { query: '{ __typename }' } } as never);
        const context = (await enveloped.contextFactory()) as unknown as Context;
        return context.principal !== null;
      } catch (error) {
        if (error instanceof GraphQLError) return false;
        throw error;
      }
    },
    execute: (args) => (args.rootValue as EnvelopedRoot).execute(args) as never,
    subscribe: (args) => (args.rootValue as EnvelopedRoot).subscribe(args) as never,
    onSubscribe: async (ctx, id, payload) => {
      // The operation's id for the log and for its errors (extensions.requestId), as over HTTP.
      const requestId = randomUUID();
      ctx.extra.requestIds.set(id, requestId);
      const authorization = authorizationOf(ctx.connectionParams, ctx.extra.request);
      // Yoga's response cache keys a result by what it saw of the HTTP request, which a socket
      // operation never went through (queries over the socket failed with 4500): the request it
      // sees is a conditional one, which the cache is configured to leave alone.
      // POST: Yoga refuses mutations it believes came by GET.
      const request = new Request('http://internal/graphql', {
        method: 'POST',
        headers: { ...(authorization ? { authorization } : {}), 'if-none-match': '*' },
      });
      const enveloped = yoga.getEnveloped({ request, requestId, params: payload } as never);
      // Who the caller is comes first, as over HTTP (see authFirst in src/graphql/yoga.ts): an
      // anonymous caller hears UNAUTHENTICATED, not what is wrong with its document or variables.
      let contextValue: Context;
      try {
        contextValue = (await enveloped.contextFactory()) as unknown as Context;
      } catch (error) {
        if (error instanceof GraphQLError) return [error];
        throw error;
      }
      const tooDeep = checkDocumentNesting(payload.query);
      if (tooDeep) return [contextValue.principal ? tooDeep : unauthenticated()];
      let document;
      try {
        document = enveloped.parse(payload.query);
      } catch (error) {
        if (!contextValue.principal) return [unauthenticated()];
        if (error instanceof GraphQLError) return [error];
        throw error;
      }
      if (!contextValue.principal && !isIntrospectionOnly(document)) return [unauthenticated()];
      const errors = enveloped.validate(enveloped.schema, document);
      if (errors.length) return errors;
      const socket = ctx.extra.socket;
      contextValue.transport = { backlog: () => socket.bufferedAmount };
      return {
        schema: enveloped.schema,
        operationName: payload.operationName,
        document,
        variableValues: payload.variables,
        contextValue,
        rootValue: { execute: enveloped.execute, subscribe: enveloped.subscribe },
      };
    },
    // Every error carries its operation's request id, in `error` messages (refused before it ran)
    // and in the results of `next` messages alike.
    onError: (ctx, id, _payload, errors) => {
      log.debug({ errors: errors.map((e) => e.message) }, 'graphql-ws operation error');
      const requestId = ctx.extra.requestIds.get(id);
      ctx.extra.requestIds.delete(id);
      // Codes as over HTTP (graphql-js's validation says GRAPHQL_VALIDATION_FAILED, not a code of ours).
      return errors.map((e) => (requestId ? withRequestId(withCode(e, requestId), requestId) : withCode(e, 'unknown')).toJSON());
    },
    onNext: (_ctx, _id, _payload, args, result) => {
      const requestId = (args.contextValue as Context | undefined)?.requestId;
      if (!requestId || !result.errors?.length) return undefined;
      return { ...result, errors: result.errors.map((e) => withRequestId(withCode(e, requestId), requestId).toJSON()) };
    },
    onComplete: (ctx, id) => {
      ctx.extra.requestIds.delete(id);
    },
  };
  const protocol = makeServer(options);
  wss.options.handleProtocols = handleProtocols;

  wss.on('connection', (socket: WebSocket, request: IncomingMessage) => {
    socket.once('error', (error) => {
      log.warn({ err: error }, 'WebSocket error; closing it');
      socket.close(CloseCode.InternalServerError, 'Internal server error');
    });
    // Keep-alive: a peer that does not answer a ping within the interval is cut.
    let pongWait: NodeJS.Timeout | null = null;
    const ping = setInterval(() => {
      if (socket.readyState !== socket.OPEN) return;
      pongWait = setTimeout(() => socket.terminate(), KEEPALIVE_MS);
      socket.once('pong', () => {
        if (pongWait) clearTimeout(pongWait);
        pongWait = null;
      });
      socket.ping();
    }, KEEPALIVE_MS);
    const closed = protocol.opened(
      {
        protocol: socket.protocol,
        // Unlike graphql-ws's own `useServer`, a send does not wait until the frame reaches the
        // kernel: that made a subscription deliver one event per event-loop turn, so a tenant-wide
        // subscriber (thousands of events a second) fell behind while the process idled. Frames
        // queue in the socket instead; the subscription closes its stream when that queue passes
        // its bound (Subscription.offer checks bufferedAmount).
        send: async (data) => {
          if (socket.readyState !== socket.OPEN) return;
          corkForThisTurn(socket);
          socket.send(data);
        },
        close: (code, reason) => socket.close(code, reason),
        onMessage: (cb) =>
          socket.on('message', async (message) => {
            try {
              await cb(String(message));
            } catch (error) {
              log.error({ err: error }, 'graphql-ws message handling failed');
              socket.close(CloseCode.InternalServerError, 'Internal server error');
            }
          }),
      },
      { socket, request, requestIds: new Map() },
    );
    socket.once('close', (code, reason) => {
      if (pongWait) clearTimeout(pongWait);
      clearInterval(ping);
      void closed(code, String(reason));
    });
  });

  return {
    async close() {
      for (const client of wss.clients) client.close(1001, 'server shutting down');
      const closing = new Promise<void>((resolve) => wss.close(() => resolve()));
      // A client whose close frame waits behind megabytes it is not reading would hold the
      // shutdown for ws's 30 s handshake timeout: cut what is still open after a second.
      const cut = setTimeout(() => {
        for (const client of wss.clients) client.terminate();
      }, 1000);
      await closing;
      clearTimeout(cut);
    },
  };
}
