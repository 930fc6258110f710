/**
 * Where the interop suite (issue 20) finds the independent Redfish peers, DMTF's public mockups and
 * the real BMC captures. None of them is part of the project or copied into it: they sit beside the
 * clone (`../shared/...`), or where INTEROP_PEERS / INTEROP_MOCKUPS / INTEROP_CAPTURES say
 * (relative paths from the repository's root). `npm test` never needs them.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { PROJECT_ROOT } from '../../../src/paths';

export interface InteropPaths {
  /** sushy-tools/, Redfish-Mockup-Server/ and bin/ (their start and stop scripts). */
  peers: string;
  /** DMTF's public mockups, one short-form mockup per folder. */
  mockups: string;
  /** Crawls and single responses of real vendor BMCs. */
  captures: string;
}

/** The Debian python the peers' scripts run (never a pyenv one), and the modules they import. */
export const PEER_PYTHON = '/usr/bin/python3';
const PYTHON_MODULES = ['flask', 'requests', 'tenacity', 'bcrypt', 'webob'];

const resolve = (value: string | undefined, fallback: string) => path.resolve(PROJECT_ROOT, value?.trim() || fallback);

export function interopPaths(env: NodeJS.ProcessEnv = process.env): InteropPaths {
  return {
    peers: resolve(env.INTEROP_PEERS, '../shared/peers'),
    mockups: resolve(env.INTEROP_MOCKUPS, '../shared/redfish-mockups'),
    captures: resolve(env.INTEROP_CAPTURES, '../shared/redfish-captures'),
  };
}

/**
 * What the suite needs and does not find, as one line (null when everything is there): the folders,
 * the peers' scripts, Debian's python3 with the peers' modules, openssl and curl.
 */
export function missingPrerequisites(env: NodeJS.ProcessEnv = process.env): string | null {
  const p = interopPaths(env);
  const missing: string[] = [];
  const need = (file: string, what: string) => { if (!fs.existsSync(file)) missing.push(what); };
  need(path.join(p.peers, 'bin', 'sushy-start.sh'), `peers (INTEROP_PEERS=${p.peers}: no bin/sushy-start.sh)`);
  if (fs.existsSync(path.join(p.peers, 'bin', 'sushy-start.sh'))) {
    need(path.join(p.peers, 'sushy-tools', 'sushy_tools', 'emulator', 'main.py'), `sushy-tools (${path.join(p.peers, 'sushy-tools')})`);
    need(path.join(p.peers, 'Redfish-Mockup-Server', 'redfishMockupServer.py'), `the Redfish Mockup Server (${path.join(p.peers, 'Redfish-Mockup-Server')})`);
    need(path.join(p.peers, 'bin', 'mockup-start.sh'), `bin/mockup-start.sh in ${p.peers}`);
  }
  need(p.mockups, `mockups (INTEROP_MOCKUPS=${p.mockups})`);
  need(p.captures, `captures (INTEROP_CAPTURES=${p.captures})`);
  if (!fs.existsSync(PEER_PYTHON)) {
    missing.push(`${PEER_PYTHON}`);
  } else {
    const probe = spawnSync(PEER_PYTHON, ['-c', `import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))`, ...PYTHON_MODULES], { encoding: 'utf8' });
    const absent = (probe.stdout ?? '').trim();
    if (probe.status !== 0) missing.push(`a working ${PEER_PYTHON}`);
    else if (absent) missing.push(`python modules ${absent.split(' ').join(', ')} (apt-get install python3-flask python3-requests python3-tenacity python3-bcrypt python3-webob)`);
  }
  for (const tool of ['openssl', 'curl']) {
    if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0) missing.push(tool);
  }
  return missing.length ? `test:interop: missing ${missing.join('; ')}` : null;
}
