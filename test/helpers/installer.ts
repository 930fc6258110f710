/**
 * The Debian installer of a control-node job, as the tests play it (the preseed's scripts and the
 * first-boot unit, seen from the service): the job's callback token and address read out of the
 * ISO the BMC was given (fetched with a Range request, as a BMC does; the preseed rides in the
 * ISO's second initrd), then steps, completion and first boot posted with that token.
 */
import fs from 'node:fs';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { extractFromIso, readCpioNewc } from './iso';
import type { PrismaClient } from '../../src/generated/prisma/client';
import { newId } from '../../src/ids';

export interface InstallerJob { token: string; api: string; job: string; bmcIp: string; preseed: string }

/** The job out of its ISO; throws when the ISO holds any of `secrets` in plain, or no crypt hash of the OS password. */
export async function readInstallerJob(image: string, dir: string, secrets: string[]): Promise<InstallerJob> {
  const res = await fetch(image, { headers: { range: 'bytes=0-' } });
  if (res.status !== 206) throw new Error(`the ISO answered ${res.status} to a Range request`);
  const file = path.join(dir, `${Math.random().toString(36).slice(2)}.iso`);
  fs.writeFileSync(file, Buffer.from(await res.arrayBuffer()));
  const extra = readCpioNewc(gunzipSync(await extractFromIso(file, '/install/preseed.gz', `${file}.preseed.gz`)));
  const get = (name: string) => extra.find((f) => f.name === name)!.data.toString('utf8');
  const all = Buffer.concat(extra.map((f) => f.data));
  if (secrets.some((s) => all.includes(Buffer.from(s))) || !/passwd\/user-password-crypted password \$6\$/.test(get('preseed.cfg'))) {
    throw new Error('the ISO holds a password in plain, or no crypt hash');
  }
  const env = Object.fromEntries(get('metal/job.env').trim().split('\n').map((l) => { const [k, v] = l.split('='); return [k!, v!.replace(/^'|'$/g, '')]; }));
  return { token: get('metal/callback-token'), api: env.METAL_API!, job: env.METAL_JOB!, bmcIp: env.METAL_BMC_IP!, preseed: get('preseed.cfg') };
}

export const postJson = (url: string, bearer: string | null, body: unknown) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...(bearer ? { authorization: `Bearer ${bearer}` } : {}) }, body: JSON.stringify(body) });

/** Steps, completion (with a reported OS password, when given), then the installed system's first boot. */
export async function playInstall(job: InstallerJob, osIp: string, reportedPassword: string | null): Promise<void> {
  for (const [step, percent, state] of [['partitioning', 20, 'active'], ['installing-base', 60, 'active'], ['installing-finish', 90, 'done']] as const) {
    const r = await postJson(`${job.api}/job/${job.job}/step`, job.token, { step, percent, state });
    if (r.status !== 200) throw new Error(`step ${step}: ${r.status} ${await r.text()}`);
    // The answer names the job by the id the ISO carries: the job's one id.
    const answer = (await r.json()) as { job_id?: string };
    if (answer.job_id !== job.job) throw new Error(`step ${step}: answered for job ${String(answer.job_id)}, not ${job.job}`);
  }
  const done = await postJson(`${job.api}/job/${job.job}/complete`, job.token, { os_ip: osIp, ...(reportedPassword ? { os_password: reportedPassword } : {}) });
  if (done.status !== 200) throw new Error(`complete: ${done.status} ${await done.text()}`);
  const first = await postJson(`${job.api}/firstboot`, job.token, { job_id: job.job, bmc_ip: job.bmcIp, os_ip: osIp });
  if (first.status !== 200) throw new Error(`firstboot: ${first.status} ${await first.text()}`);
}

/** A simulated BMC as readyNodes needs it. */
interface BmcOf { id: string; url: string; username: string; password: string; state(): { macs: string[] } }

/**
 * One ready node (enrolled, inspected, commissioned) per simulated BMC, as the provisioning tests
 * start from: its BMC at the simulator's bare IP, verified with `caCert`, its credentials in the
 * broker, its first MAC confirmed. Returns the node ids by machine id.
 */
export async function readyNodes(
  services: { prisma: PrismaClient; secrets: { put(tenantId: string, value: Record<string, unknown>): Promise<string> } | null },
  where: { tenantId: string; siteId: string; poolId: string },
  machines: BmcOf[],
  opts: { driver: string; caCert: string },
): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const m of machines) {
    const ref = await services.secrets!.put(where.tenantId, { username: m.username, password: m.password });
    const id = newId('MetalNode');
    await services.prisma.node.create({
      data: {
        id, ...where, name: m.id, provisionState: 'ready',
        bmcAddress: new URL(m.url).hostname, bmcDriver: opts.driver, bmcDriverOptions: { caCert: opts.caCert }, bmcCredentialsRef: ref,
        driverBindings: { power: opts.driver, management: opts.driver, virtualMedia: opts.driver }, macs: [m.state().macs[0]!.toLowerCase()],
      },
    });
    out.set(m.id, id);
  }
  return out;
}
