import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/**
 * A site's BMC CA and one certificate it signed for the given IP addresses (openssl, RSA 2048 as
 * most BMCs have), written into `dir`: for simulated BMCs reached at bare IPs over verified TLS.
 */
export function bmcCertificates(dir: string, ips: readonly string[]): { caFile: string; ca: string; key: Buffer; cert: Buffer } {
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  fs.writeFileSync(path.join(dir, 'ext.cnf'), `subjectAltName=${ips.map((ip) => `IP:${ip}`).join(',')}\nbasicConstraints=CA:FALSE\n`);
  openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=site BMC CA');
  openssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'bmc.key', '-out', 'bmc.csr', '-subj', '/CN=bmc');
  openssl('x509', '-req', '-in', 'bmc.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'bmc.pem', '-days', '2', '-extfile', 'ext.cnf');
  const caFile = path.join(dir, 'ca.pem');
  return { caFile, ca: fs.readFileSync(caFile, 'utf8'), key: fs.readFileSync(path.join(dir, 'bmc.key')), cert: fs.readFileSync(path.join(dir, 'bmc.pem')) };
}
