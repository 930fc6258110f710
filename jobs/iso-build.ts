import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Logger } from 'pino';
import type { Sql } from '../src/db/sql';
import type { SecretBroker } from '../clients/secrets/broker';
import { randomUUID } from 'node:crypto';
import { wakeRun } from './wake';
import { sendInTx } from './send';
import type { Runner } from '../src/modules/metal/node-store';
import { buildInstallerIso, findBaseImage, type BaseImage } from '../src/modules/provision/iso';
import { endIsoBuilds, markIsoBuildStarted, publishIso, recordIsoBuildQueued, recordIsoReport } from '../src/modules/provision/iso-store';
import { ISO_DIR_FULL_MESSAGE, isoDirHasRoom } from '../src/modules/provision/iso-janitor';
import { renderPreseed } from '../src/modules/provision/preseed';
import { installHostname } from '../src/modules/provision/hostname';
import type { InstallParams } from '../src/modules/provision/install-params';

/**
 * The ISO-build queue's worker (provision.iso): builds the installer ISO of one control-node job
 * (a metal-install run) from the base image, with the job's preseed, the OS user's password from
 * the broker (only its SHA-512 crypt hash goes into the ISO) and a fresh callback token; publishes
 * it at its unguessable URL (ISO_DIR) with the token's hash; records the outcome as the run's iso
 * report and wakes the run, in one transaction. Idempotent: a job already built is not built again.
 * A build that fails is recorded as such (the Building ISO step fails with the reason), never retried
 * blindly: the reason is the request's or the host's, and a retry would give the same answer.
 */

export interface IsoBuildDeps {
  sql: Sql;
  secrets: SecretBroker | null;
  log: Logger;
  isoDir: string;
  /** The service's URL as the BMC and the installer reach it (PUBLIC_URL), read at each build. */
  publicUrl: () => string | undefined;
  /** A folder with linux, initrd.gz, isolinux.bin, ldlinux.c32 (INSTALLER_BASE_DIR), else Debian's packages. */
  baseDir?: string;
  /** How long a built ISO's URL lives at most (the job ends it sooner). */
  ttlMs?: number;
  /** ISO_DIR_MAX_BYTES (0 or unset: no cap). */
  maxBytes?: number;
}

/** Base images, found once per folder: a cache of what every build reads. */
const bases = new Map<string, Promise<BaseImage>>();
function baseImage(dir: string | undefined): Promise<BaseImage> {
  const key = dir ?? '';
  let base = bases.get(key);
  if (!base) {
    base = findBaseImage(dir);
    base.catch(() => bases.delete(key));
    bases.set(key, base);
  }
  return base;
}

const clip = (s: string) => (s.length > 500 ? `${s.slice(0, 499)}…` : s);

/**
 * Queues the ISO build of metal-install run `runId` in the caller's transaction (its Building ISO
 * step): the provision.iso job (pg-boss's send) and its iso_build_job row, which is what GET
 * /controlnode/provision/queue lists (when it was queued, when a worker started it); the worker
 * ends the row when it records the build's outcome. Resolves to the job's id.
 */
export async function queueIsoBuild(db: Pick<Runner, 'query'>, runId: string): Promise<string> {
  const id = randomUUID();
  await sendInTx(db, 'provision.iso', { runId }, { id });
  await recordIsoBuildQueued(db, id, runId);
  return id;
}

export async function buildRunIso(deps: IsoBuildDeps, runId: string, jobId?: string): Promise<'built' | 'failed' | 'skipped'> {
  if (jobId) await markIsoBuildStarted(deps.sql, jobId);
  const outcome = await buildOnce(deps, runId);
  // Built or failed: the outcome is recorded (record(), with the row ended in its transaction); skipped: nothing to build.
  if (outcome === 'skipped') await endIsoBuilds(deps.sql, runId);
  return outcome;
}

async function buildOnce(deps: IsoBuildDeps, runId: string): Promise<'built' | 'failed' | 'skipped'> {
  const { rows: [run] } = await deps.sql.query(
    `SELECT w.id, w.kind, w.status, w.params, n.id AS node_id, n.tenant_id, n.bmc_address, n.inventory, b.os_credentials_ref,
            EXISTS (SELECT 1 FROM install_report r WHERE r.run_id = w.id AND r.kind = 'iso') AS built
       FROM workflow_run w JOIN node n ON n.id = w.node_id LEFT JOIN bmc_info b ON b.node_id = n.id WHERE w.id = $1`,
    [runId],
  );
  if (!run || run.kind !== 'metal-install' || !['queued', 'running', 'waiting'].includes(run.status as string) || run.built) return 'skipped';
  const params = run.params as InstallParams;
  const record = async (payload: Record<string, unknown>, publish?: { file: string; name: string; token: string }) => {
    await deps.sql.transaction(async (tx) => {
      let isoId: string | null = null;
      let body = payload;
      if (publish) {
        const published = await publishIso(tx, deps.isoDir, { file: publish.file, name: publish.name, nodeId: run.node_id as string, runId, ttlMs: deps.ttlMs ?? 6 * 3600_000, callbackToken: publish.token });
        isoId = published.id;
        body = { ...payload, imageUrl: `${publicUrl!.replace(/\/+$/, '')}${published.urlPath}` };
      }
      await recordIsoReport(tx, runId, isoId, body);
      await endIsoBuilds(tx, runId);
      await wakeRun(tx, runId);
    });
  };
  const started = Date.now();
  const publicUrl = deps.publicUrl();
  let file: string | null = null;
  try {
    if (!(await isoDirHasRoom(deps.isoDir, deps.maxBytes ?? 0))) {
      deps.log.warn({ runId, isoDir: deps.isoDir }, 'installer ISO not built: ISO_DIR is full (ISO_DIR_MAX_BYTES)');
      await record({ ok: false, code: 'ISO_DIR_FULL', error: ISO_DIR_FULL_MESSAGE });
      return 'failed';
    }
    if (!publicUrl) throw new Error('PUBLIC_URL is not set: the BMC cannot fetch the ISO without the service\'s address');
    if (!deps.secrets) throw new Error('no secret broker is configured: the OS user\'s password cannot be read');
    if (!run.os_credentials_ref) throw new Error('the node has no OS password in the broker');
    const secret = (await deps.secrets.get(run.os_credentials_ref as string, run.tenant_id as string)) as { password?: unknown } | null;
    if (!secret || typeof secret.password !== 'string') throw new Error('the OS password in the broker is not { username, password }');
    const hostname = installHostname(params, run.inventory);
    if (!hostname) throw new Error('the job has no host name: the request gave none, NetBox named no device for the BMC and the BMC reports no serial');
    const token = randomBytes(32).toString('base64url');
    const preseed = renderPreseed({
      hostname, osUsername: params.osUsername, osPassword: secret.password, disks: params.disks, poolType: params.poolType,
      nicMac: params.nicMac, nicName: params.nicName, network: params.network ?? { mode: 'dhcp' }, gpuPassthrough: params.gpuPassthrough,
      // The job's id (a new BMC's provision: the enrollment that began it), the one provision answered with.
      callback: { baseUrl: params.callbackBase ?? publicUrl, jobId: typeof run.params.jobId === 'string' ? run.params.jobId : runId, token }, bmcIp: run.bmc_address as string,
    });
    await fs.mkdir(deps.isoDir, { recursive: true });
    file = path.join(deps.isoDir, `${runId}-${randomBytes(4).toString('hex')}.iso`);
    const workDir = await fs.mkdtemp(path.join(os.tmpdir(), 'metal-iso-'));
    let built: Awaited<ReturnType<typeof buildInstallerIso>>;
    try {
      built = await buildInstallerIso({ base: await baseImage(deps.baseDir), preseed, outPath: file, workDir });
    } finally {
      await fs.rm(workDir, { recursive: true, force: true });
    }
    const bytes = (await fs.stat(file)).size;
    // A BIOS-only ISO (a base folder without the EFI files) is said so: a UEFI-only BMC will not boot it.
    await record({ ok: true, bytes, ms: Date.now() - started, uefi: built.uefi, ...(built.note ? { note: built.note } : {}) }, { file, name: `${hostname.split('.')[0]}.iso`, token });
    if (!built.uefi) deps.log.warn({ runId, note: built.note }, 'installer ISO built for BIOS only');
    deps.log.info({ runId, bytes, ms: Date.now() - started, uefi: built.uefi }, 'installer ISO built');
    return 'built';
  } catch (error) {
    if (file) await fs.rm(file, { force: true }).catch(() => undefined);
    const message = clip(error instanceof Error ? error.message : String(error));
    deps.log.warn({ runId, err: message }, 'installer ISO build failed');
    await record({ ok: false, error: message });
    return 'failed';
  }
}
