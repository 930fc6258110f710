/**
 * sushy-tools (OpenStack's Redfish emulator, fake driver) on loopback, over HTTP with basic auth or
 * over HTTPS (SUSHY_TLS=1: a throwaway self-signed certificate the start script writes to
 * $HARNESS_DIR/sushy/tls.crt, which the node is given as driverOptions.caCert, docs/bmc-redfish.md).
 * What it is known to do: ../shared/peers/README.md and bin/sushy/emulator.conf.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Agent, request, type Dispatcher } from 'undici';
import { interopPaths } from './peers';
import { startPeer, type PeerProcess } from './peer-process';

/** The three fake systems of bin/sushy/emulator.conf (peers README, "sushy-tools, fake driver"): Id = UUID. */
export const SUSHY_SYSTEMS = {
  'node-1': { uuid: '1e0b9a4c-6b0e-4a59-9d0b-000000000001', macs: ['52:54:00:aa:00:01', '52:54:00:bb:00:01'], power: 'Off', storage: true },
  'node-2': { uuid: '1e0b9a4c-6b0e-4a59-9d0b-000000000002', macs: ['52:54:00:aa:00:02'], power: 'Off', storage: false },
  'node-3': { uuid: '1e0b9a4c-6b0e-4a59-9d0b-000000000003', macs: ['52:54:00:aa:00:03'], power: 'On', storage: false },
} as const;
export type SushyNode = keyof typeof SUSHY_SYSTEMS;

export interface Sushy extends PeerProcess {
  /** http(s)://127.0.0.1:<port>: the BMC address a node is enrolled with. */
  url: string;
  tls: boolean;
  username: string;
  password: string;
  /** The self-signed certificate (PEM) in TLS mode, else null. */
  caCert: string | null;
  /** A GET as any Redfish client would make it (basic auth; the certificate trusted in TLS mode). */
  get(redfishPath: string): Promise<{ status: number; body: any }>;
  /** A POST of a JSON body, the same way (for a test that acts as the BMC's client itself). */
  post(redfishPath: string, body: unknown): Promise<{ status: number; body: any }>;
}

export async function startSushy(opts: { tls?: boolean } = {}): Promise<Sushy> {
  const { peers } = interopPaths();
  const username = 'admin';
  const password = `sushy-${randomBytes(9).toString('hex')}`;
  const tls = opts.tls === true;
  const peer = await startPeer({
    name: tls ? 'sushy-tls' : 'sushy',
    start: (port) => ({
      script: path.join(peers, 'bin', 'sushy-start.sh'),
      args: [path.join(peers, 'sushy-tools'), String(port), username, password],
      env: { SUSHY_TLS: tls ? '1' : '0' },
    }),
    stop: () => ({ script: path.join(peers, 'bin', 'sushy-stop.sh'), args: [] }),
    pidFile: (dir) => path.join(dir, 'sushy', 'pid'),
  });
  const caCert = tls ? fs.readFileSync(path.join(peer.harnessDir, 'sushy', 'tls.crt'), 'utf8') : null;
  const url = `${tls ? 'https' : 'http'}://127.0.0.1:${peer.port}`;
  const dispatcher: Dispatcher = new Agent(caCert ? { connect: { ca: caCert } } : {});
  const auth = `Basic ${Buffer.from(`${username}:${password}`).toString('base64')}`;
  const send = async (method: 'GET' | 'POST', redfishPath: string, json?: unknown) => {
    const r = await request(`${url}${redfishPath}`, {
      method, dispatcher, headersTimeout: 10000, bodyTimeout: 10000,
      headers: { authorization: auth, accept: 'application/json', ...(json === undefined ? {} : { 'content-type': 'application/json' }) },
      body: json === undefined ? undefined : JSON.stringify(json),
    });
    const text = await r.body.text();
    let body: unknown = text;
    try { body = JSON.parse(text); } catch { /* not JSON */ }
    return { status: r.statusCode, body: body as any };
  };
  return {
    ...peer,
    url, tls, username, password, caCert,
    get: (redfishPath) => send('GET', redfishPath),
    post: (redfishPath, body) => send('POST', redfishPath, body),
    async stop() {
      await (dispatcher as Agent).close().catch(() => undefined);
      await peer.stop();
    },
  };
}
