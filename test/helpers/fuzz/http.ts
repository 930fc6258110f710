import http from 'node:http';

export interface RawRequest {
  method: string;
  /** Sent as written: `..`, `%00` and `%ZZ` reach the server untouched (fetch would normalise them). */
  path: string;
  headers: Record<string, string>;
  body?: Buffer;
}

export interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  /** true when the server started a stream (text/event-stream): only its head was read. */
  streamed: boolean;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });

/** Closes the sockets kept alive between requests (call once the suite is done). */
export const closeAgent = () => agent.destroy();

/**
 * One request over node:http, which sends the path and the body bytes exactly as given. A stream
 * (SSE) is closed as soon as its head arrives. The timeout only keeps a hung server from hanging
 * the suite: an answer that never comes is a finding, reported as status 0.
 */
export function send(base: URL, request: RawRequest, timeoutMs = 20_000): Promise<RawResponse> {
  return new Promise((resolve) => {
    let settled = false;
    const done = (response: RawResponse) => {
      if (settled) return;
      settled = true;
      resolve(response);
    };
    let req: http.ClientRequest;
    try {
      req = http.request({
        host: base.hostname,
        port: base.port,
        method: request.method,
        path: request.path,
        headers: { ...request.headers, ...(request.body ? { 'content-length': String(request.body.length) } : {}) },
        agent,
        timeout: timeoutMs,
      });
    } catch (error) {
      // node:http refused to send it (e.g. a character it will not put in a path): not the server's doing.
      return done({ status: -1, headers: {}, body: Buffer.from(String((error as Error).message)), streamed: false });
    }
    req.on('response', (res) => {
      if (String(res.headers['content-type'] ?? '').startsWith('text/event-stream')) {
        res.destroy();
        return done({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.alloc(0), streamed: true });
      }
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => done({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks), streamed: false }));
      res.on('error', () => done({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks), streamed: false }));
    });
    req.on('timeout', () => {
      req.destroy();
      done({ status: 0, headers: {}, body: Buffer.from('no answer before the timeout'), streamed: false });
    });
    req.on('error', (error) => done({ status: 0, headers: {}, body: Buffer.from(`connection error: ${error.message}`), streamed: false }));
    req.end(request.body);
  });
}
