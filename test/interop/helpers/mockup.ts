/**
 * DMTF's Redfish Mockup Server on loopback, serving one short-form mockup (a folder of
 * ../shared/redfish-mockups or of the captures). Static: see ../shared/peers/README.md.
 */
import fs from 'node:fs';
import path from 'node:path';
import { interopPaths } from './peers';
import { startPeer, type PeerProcess } from './peer-process';

export interface MockupServer extends PeerProcess {
  /** http://127.0.0.1:<port>: the BMC address. */
  url: string;
  mockupDir: string;
}

export async function startMockupServer(mockupDir: string): Promise<MockupServer> {
  const { peers } = interopPaths();
  if (!fs.existsSync(path.join(mockupDir, 'index.json'))) throw new Error(`not a short-form mockup (no index.json): ${mockupDir}`);
  const peer = await startPeer({
    name: `mockup-${path.basename(mockupDir)}`,
    start: (port) => ({ script: path.join(peers, 'bin', 'mockup-start.sh'), args: [path.join(peers, 'Redfish-Mockup-Server'), mockupDir, String(port)] }),
    stop: (port) => ({ script: path.join(peers, 'bin', 'mockup-stop.sh'), args: [String(port)] }),
    pidFile: (dir, port) => path.join(dir, `mockup-${port}`, 'pid'),
  });
  return { ...peer, url: `http://127.0.0.1:${peer.port}`, mockupDir };
}

/** The Ids of a mockup's ComputerSystems, from its Systems collection (none: the mockup has no system). */
export function mockupSystemIds(mockupDir: string): string[] {
  const file = path.join(mockupDir, 'Systems', 'index.json');
  if (!fs.existsSync(file)) return [];
  const members = (JSON.parse(fs.readFileSync(file, 'utf8')).Members ?? []) as { '@odata.id': string }[];
  return members.map((m) => m['@odata.id'].replace(/\/+$/, '').split('/').pop()!);
}
