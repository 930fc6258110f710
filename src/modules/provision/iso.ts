import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import type { InitrdFile, Preseed } from './preseed';

/**
 * One control-node job's installer ISO (issue 11 item 3): Debian's netboot kernel and initrd
 * (package debian-installer-12-netboot-amd64, or INSTALLER_BASE_DIR) with the job's preseed, made
 * BIOS-bootable with isolinux by xorriso.
 *
 * The netboot installer never mounts the CD (PEERS.md), so the preseed cannot be a file on it: it
 * rides in an initramfs the kernel unpacks after Debian's own (isolinux's `initrd=a,b` loads both;
 * the kernel unpacks concatenated initramfs archives in order). That second initrd is a small
 * gzip'd cpio (newc) written here, so the 40 MB base initrd is never copied or rewritten: xorriso
 * grafts the base files straight into the image.
 */

export interface BaseImage {
  kernel: string;
  initrd: string;
  /** isolinux.bin and ldlinux.c32 (BIOS boot), and the MBR that makes the ISO hybrid. */
  isolinuxBin: string;
  ldlinux: string;
  isohybridMbr: string | null;
}

const DEBIAN_NETBOOT = '/usr/lib/debian-installer/images/12/amd64/text/debian-installer/amd64';
const ISOLINUX_DIR = '/usr/lib/ISOLINUX';

/** The base files, from a folder holding linux, initrd.gz, isolinux.bin and ldlinux.c32 (and isohdpfx.bin), or Debian's packages. */
export async function findBaseImage(baseDir?: string): Promise<BaseImage> {
  const candidates: BaseImage = baseDir
    ? { kernel: path.join(baseDir, 'linux'), initrd: path.join(baseDir, 'initrd.gz'), isolinuxBin: path.join(baseDir, 'isolinux.bin'), ldlinux: path.join(baseDir, 'ldlinux.c32'), isohybridMbr: path.join(baseDir, 'isohdpfx.bin') }
    : { kernel: `${DEBIAN_NETBOOT}/linux`, initrd: `${DEBIAN_NETBOOT}/initrd.gz`, isolinuxBin: `${ISOLINUX_DIR}/isolinux.bin`, ldlinux: `${DEBIAN_NETBOOT}/boot-screens/ldlinux.c32`, isohybridMbr: `${ISOLINUX_DIR}/isohdpfx.bin` };
  const missing: string[] = [];
  for (const key of ['kernel', 'initrd', 'isolinuxBin', 'ldlinux'] as const) {
    if (!(await fs.stat(candidates[key]).then((s) => s.isFile(), () => false))) missing.push(candidates[key]);
  }
  if (missing.length) {
    throw new Error(`the installer's base image is incomplete (missing ${missing.join(', ')}): install the Debian packages debian-installer-12-netboot-amd64 and isolinux, or give a base folder holding linux, initrd.gz, isolinux.bin and ldlinux.c32`);
  }
  const mbr = candidates.isohybridMbr && (await fs.stat(candidates.isohybridMbr).then((s) => s.isFile(), () => false)) ? candidates.isohybridMbr : null;
  return { ...candidates, isohybridMbr: mbr };
}

/** A cpio archive in the "newc" format the kernel's initramfs unpacker reads, with the files' directories. */
export function cpioNewc(files: InitrdFile[], mtime = Math.floor(Date.now() / 1000)): Buffer {
  const parts: Buffer[] = [];
  let ino = 1;
  const pad4 = (n: number) => (4 - (n % 4)) % 4;
  const entry = (name: string, mode: number, data: Buffer) => {
    const nameBytes = Buffer.from(name + '\0', 'utf8');
    const hex = (n: number) => n.toString(16).padStart(8, '0');
    const header = '070701' + [ino++, mode, 0, 0, mode & 0o040000 ? 2 : 1, mtime, data.length, 0, 0, 0, 0, nameBytes.length, 0].map(hex).join('');
    parts.push(Buffer.from(header, 'ascii'), nameBytes, Buffer.alloc(pad4(110 + nameBytes.length)), data, Buffer.alloc(pad4(data.length)));
  };
  const dirs = new Set<string>();
  for (const f of files) {
    if (f.path.startsWith('/') || f.path.split('/').includes('..')) throw new Error(`an initrd path must be relative: ${f.path}`);
    const segs = f.path.split('/');
    for (let i = 1; i < segs.length; i += 1) {
      const dir = segs.slice(0, i).join('/');
      if (!dirs.has(dir)) {
        dirs.add(dir);
        entry(dir, 0o040755, Buffer.alloc(0));
      }
    }
    entry(f.path, 0o100000 | f.mode, Buffer.from(f.content, 'utf8'));
  }
  entry('TRAILER!!!', 0, Buffer.alloc(0));
  return Buffer.concat(parts);
}

/** Runs a command-line tool (xorriso), its last stderr lines in the error. */
export function run(cmd: string, args: string[], timeoutMs: number): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: timeoutMs, maxBuffer: 4 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error) {
        const e = error as NodeJS.ErrnoException & { killed?: boolean };
        reject(new Error(e.code === 'ENOENT' ? `${cmd} is not installed (Debian package xorriso)` : `${cmd} failed${e.killed ? ' (timed out)' : ''}: ${String(stderr).trim().split('\n').slice(-3).join(' | ') || e.message}`));
      } else resolve({ stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

export interface BuiltIso {
  path: string;
  bytes: number;
  ms: number;
}

/**
 * Writes the job's ISO to `outPath` (its folder must exist): the base kernel and initrd, the job's
 * preseed initrd and an isolinux menu that boots straight into the installer with `bootArgs`.
 * `workDir` holds the two small generated files while xorriso runs (removed afterwards).
 */
export async function buildInstallerIso(opts: { base: BaseImage; preseed: Preseed; outPath: string; workDir: string; volumeId?: string; timeoutMs?: number }): Promise<BuiltIso> {
  const started = performance.now();
  const { base, preseed } = opts;
  const volumeId = (opts.volumeId ?? 'METAL_INSTALL').toUpperCase().replace(/[^A-Z0-9_]/g, '_').slice(0, 32);
  await fs.mkdir(opts.workDir, { recursive: true, mode: 0o700 });
  const stage = await fs.mkdtemp(path.join(opts.workDir, 'iso-'));
  try {
    const preseedGz = path.join(stage, 'preseed.gz');
    await fs.writeFile(preseedGz, gzipSync(cpioNewc(preseed.files), { level: 6 }), { mode: 0o600 });
    const cfg = path.join(stage, 'isolinux.cfg');
    await fs.writeFile(cfg, [
      'default install', 'prompt 0', 'timeout 0',
      'label install',
      '  kernel /install/vmlinuz',
      `  append initrd=/install/initrd.gz,/install/preseed.gz ${preseed.bootArgs.join(' ')}`,
      '',
    ].join('\n'), { mode: 0o600 });
    const tmpOut = `${opts.outPath}.partial`;
    await fs.rm(tmpOut, { force: true });
    await run('xorriso', [
      '-as', 'mkisofs', '-quiet', '-o', tmpOut, '-V', volumeId, '-J', '-R',
      '-b', 'isolinux/isolinux.bin', '-c', 'isolinux/boot.cat', '-no-emul-boot', '-boot-load-size', '4', '-boot-info-table',
      ...(base.isohybridMbr ? ['-isohybrid-mbr', base.isohybridMbr] : []),
      '-graft-points',
      `isolinux/isolinux.bin=${base.isolinuxBin}`, `isolinux/ldlinux.c32=${base.ldlinux}`, `isolinux/isolinux.cfg=${cfg}`,
      `install/vmlinuz=${base.kernel}`, `install/initrd.gz=${base.initrd}`, `install/preseed.gz=${preseedGz}`,
    ], opts.timeoutMs ?? 60_000);
    await fs.chmod(tmpOut, 0o600);
    await fs.rename(tmpOut, opts.outPath);
    const { size } = await fs.stat(opts.outPath);
    return { path: opts.outPath, bytes: size, ms: performance.now() - started };
  } finally {
    await fs.rm(stage, { recursive: true, force: true });
  }
}
