import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** A small image on loopback for InsertMedia (sushy downloads what it is given: peers README, "VirtualMedia"). */
export async function startImageServer(bytes = 64 * 1024): Promise<{ url: string; gets: string[]; stop(): Promise<void> }> {
  const image = Buffer.alloc(bytes);
  const gets: string[] = [];
  const server = http.createServer((req, res) => {
    gets.push(`${req.method} ${req.url}`);
    if (req.url !== '/interop.iso' || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(image.length) });
    res.end(req.method === 'HEAD' ? undefined : image);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/interop.iso`,
    gets,
    stop: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
}
