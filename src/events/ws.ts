import type { IncomingMessage, Server } from 'node:http';
import { randomUUID } from 'node:crypto';
import { WebSocketServer, type WebSocket } from 'ws';
import { useServer } from 'graphql-ws/use/ws';
import { GraphQLError, type ExecutionArgs } from 'graphql';
import type { Logger } from 'pino';
import type { GraphqlServer } from '../graphql/yoga';
import type { Context } from '../context';

interface Extra extends Record<PropertyKey, unknown> {
  socket: WebSocket;
  request: IncomingMessage;
}

const corked = new WeakSet<WebSocket>();

/**
 * Corks the WebSocket's TCP socket until the next turn of the event loop: the messages a dispatch
 * queues for one subscriber (a tenant-wide one gets dozens per batch) leave in one write instead of
 * one system call each.
 */
function corkUntilNextTurn(ws: WebSocket): void {
  const tcp = (ws as unknown as { _socket?: import('node:net').Socket })._socket;
  if (!tcp || corked.has(ws)) return;
  corked.add(ws);
  tcp.cork();
  setImmediate(() => {
    corked.delete(ws);
    tcp.uncork();
  });
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

  const disposable = useServer<Record<string, unknown> | undefined, Extra>(
    {
      execute: (args) => (args.rootValue as EnvelopedRoot).execute(args) as never,
      subscribe: (args) => (args.rootValue as EnvelopedRoot).subscribe(args) as never,
      onSubscribe: async (ctx, _id, payload) => {
        const given = ctx.connectionParams?.authorization ?? ctx.connectionParams?.Authorization;
        const authorization = typeof given === 'string' ? given : ctx.extra.request.headers.authorization;
        const request = new Request('http://internal/graphql', { headers: authorization ? { authorization } : {} });
        const requestId = randomUUID();
        const enveloped = yoga.getEnveloped({ request, requestId, params: payload } as never);
        let document;
        try {
          document = enveloped.parse(payload.query);
        } catch (error) {
          if (error instanceof GraphQLError) return [error];
          throw error;
        }
        const errors = enveloped.validate(enveloped.schema, document);
        if (errors.length) return errors;
        let contextValue: Context;
        try {
          contextValue = (await enveloped.contextFactory()) as unknown as Context;
        } catch (error) {
          if (error instanceof GraphQLError) return [error];
          throw error;
        }
        const socket = ctx.extra.socket;
        contextValue.transport = { backlog: () => socket.bufferedAmount, cork: () => corkUntilNextTurn(socket) };
        return {
          schema: enveloped.schema,
          operationName: payload.operationName,
          document,
          variableValues: payload.variables,
          contextValue,
          rootValue: { execute: enveloped.execute, subscribe: enveloped.subscribe },
        };
      },
      onError: (_ctx, _id, _payload, errors) => {
        log.debug({ errors: errors.map((e) => e.message) }, 'graphql-ws operation error');
      },
    },
    wss,
  );

  return {
    async close() {
      for (const client of wss.clients) client.close(1001, 'server shutting down');
      await disposable.dispose();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
}
