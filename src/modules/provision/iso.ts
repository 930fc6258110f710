import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import type { InitrdFile, Preseed } from './preseed';

/**
 * One control-node job's installer ISO (issue 11 item 3): Debian's netboot kernel and initrd
 * (package debian-installer-12-netboot-amd64, or INSTALLER_BASE_DIR) with the job's preseed, made
 * bootable by xorriso both ways a BMC's virtual CD boots: BIOS with isolinux, UEFI with GRUB.
 *
 * The netboot installer never mounts the CD (PEERS.md), so the preseed cannot be a file on it: it
 * rides in an initramfs the kernel unpacks after Debian's own (isolinux's `initrd=a,b` and GRUB's
 * `initrd a b` both load the two; the kernel unpacks concatenated initramfs archives in order). That
 * second initrd is a small gzip'd cpio (newc) written here, so the 40 MB base initrd is never copied
 * or rewritten: xorriso grafts the base files straight into the image.
 *
 * UEFI, as Debian's own netinst ISO does it (debian-cd): a second El Torito entry (platform 0xEF)
 * is a FAT image, boot/grub/efi.img, holding EFI/BOOT/BOOTX64.EFI. That is Debian's shim
 * (bootnetx64.efi, signed by Microsoft's UEFI CA, so Secure Boot passes), which loads the
 * grubx64.efi beside it: Debian's signed, monolithic GRUB from the same netboot package (every
 * module it needs, iso9660, fat, search, regexp and linux among them, is built in; Secure Boot
 * forbids loading others). No fbx64.efi is beside the shim, so it never runs the fallback that
 * writes boot entries into the BMC's NVRAM. GRUB's embedded prefix is `/debian-installer/amd64/grub`
 * with no device (`strings grubx64.efi`; its memdisk config sources `$prefix/grub.cfg`), so it reads
 * that file from the device it was loaded from: over PXE the TFTP server, from a CD the ISO9660 disk
 * (OVMF gives GRUB `(cd0)`) or, by firmware, the FAT image's partition (a USB stick's ESP). Both
 * carry, at that path (and the other prefixes Debian's GRUB builds use), the same small redirect
 * (grubRedirect) that finds the ISO9660 side by a marker file named after the EFI image,
 * `/.metal-iso-<id>`, and sources `/boot/grub/grub.cfg` there: the job's menu, with the kernel,
 * initrds and command line isolinux.cfg has (one source, `installerCommandLine`; the kernel sees
 * the same line, less the `initrd=` word isolinux itself reads). So the FAT image holds nothing of
 * the job and is built once per base image (mtools, no root, no loop mount) and kept in memory;
 * each build only writes it out for xorriso to graft.
 *
 * A base folder without grubx64.efi makes a BIOS-only ISO (BuiltIso.uefi false, with a note).
 */

export interface BaseImage {
  kernel: string;
  initrd: string;
  /** isolinux.bin and ldlinux.c32 (BIOS boot), and the MBR that makes the ISO hybrid. */
  isolinuxBin: string;
  ldlinux: string;
  isohybridMbr: string | null;
  /**
   * UEFI boot: a GRUB EFI binary (Debian's signed netboot grubx64.efi) and the shim that loads it
   * under Secure Boot (bootnetx64.efi), or null for none (then BOOTX64.EFI is GRUB itself).
   * Absent or null: the base has no GRUB, the ISO boots BIOS only.
   */
  efi?: { grub: string; shim: string | null } | null;
}

const DEBIAN_NETBOOT = '/usr/lib/debian-installer/images/12/amd64/text/debian-installer/amd64';
const ISOLINUX_DIR = '/usr/lib/ISOLINUX';

/** Where both boot menus find the kernel and the two initrds on the ISO. */
const KERNEL = '/install/vmlinuz';
const INITRDS = ['/install/initrd.gz', '/install/preseed.gz'] as const;
/** The EFI boot image and the job's GRUB menu on the ISO9660 side (Debian's netinst paths). */
const EFI_IMAGE = 'boot/grub/efi.img';
const JOB_GRUB_CFG = '/boot/grub/grub.cfg';
/**
 * Where Debian's GRUB builds look for their grub.cfg relative to the device they booted from: the
 * netboot grubx64.efi's embedded prefix (what Debian's packages give), the prefix of
 * grub-efi-amd64-signed's disk image, and `$cmdpath` (the CD image's fallback). The redirect is
 * at each, on the FAT image and on the ISO9660 side alike.
 */
const GRUB_CFG_PLACES = ['debian-installer/amd64/grub/grub.cfg', 'EFI/debian/grub.cfg', 'EFI/BOOT/grub.cfg'];

const isFile = (p: string) => fs.stat(p).then((s) => s.isFile(), () => false);

/**
 * The base files, from a folder holding linux, initrd.gz, isolinux.bin and ldlinux.c32 (and
 * isohdpfx.bin; for UEFI grubx64.efi and optionally bootnetx64.efi, the shim), or Debian's packages
 * (where the EFI files must be: the netboot package ships them).
 */
export async function findBaseImage(baseDir?: string): Promise<BaseImage> {
  const candidates: Required<BaseImage> & { efi: { grub: string; shim: string } } = baseDir
    ? { kernel: path.join(baseDir, 'linux'), initrd: path.join(baseDir, 'initrd.gz'), isolinuxBin: path.join(baseDir, 'isolinux.bin'), ldlinux: path.join(baseDir, 'ldlinux.c32'), isohybridMbr: path.join(baseDir, 'isohdpfx.bin'),
      efi: { grub: path.join(baseDir, 'grubx64.efi'), shim: path.join(baseDir, 'bootnetx64.efi') } }
    : { kernel: `${DEBIAN_NETBOOT}/linux`, initrd: `${DEBIAN_NETBOOT}/initrd.gz`, isolinuxBin: `${ISOLINUX_DIR}/isolinux.bin`, ldlinux: `${DEBIAN_NETBOOT}/boot-screens/ldlinux.c32`, isohybridMbr: `${ISOLINUX_DIR}/isohdpfx.bin`,
      efi: { grub: `${DEBIAN_NETBOOT}/grubx64.efi`, shim: `${DEBIAN_NETBOOT}/bootnetx64.efi` } };
  const missing: string[] = [];
  for (const key of ['kernel', 'initrd', 'isolinuxBin', 'ldlinux'] as const) {
    if (!(await isFile(candidates[key]))) missing.push(candidates[key]);
  }
  // Debian's packages always ship the EFI pair; a base folder may leave them out (BIOS only).
  if (!baseDir) for (const p of [candidates.efi.grub, candidates.efi.shim]) if (!(await isFile(p))) missing.push(p);
  if (missing.length) {
    throw new Error(`the installer's base image is incomplete (missing ${missing.join(', ')}): install the Debian packages debian-installer-12-netboot-amd64 and isolinux, or give a base folder holding linux, initrd.gz, isolinux.bin and ldlinux.c32`);
  }
  // Symlinks resolved: xorriso (-R) would graft a link as a link, pointing off the CD.
  const real = (p: string) => fs.realpath(p);
  const mbr = candidates.isohybridMbr && (await isFile(candidates.isohybridMbr)) ? await real(candidates.isohybridMbr) : null;
  const efi = (await isFile(candidates.efi.grub)) ? { grub: await real(candidates.efi.grub), shim: (await isFile(candidates.efi.shim)) ? await real(candidates.efi.shim) : null } : null;
  return { kernel: await real(candidates.kernel), initrd: await real(candidates.initrd), isolinuxBin: await real(candidates.isolinuxBin), ldlinux: await real(candidates.ldlinux), isohybridMbr: mbr, efi };
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

/** The Debian package each command-line tool comes in, for the error when it is missing. */
const PACKAGE_OF: Record<string, string> = { xorriso: 'xorriso', mformat: 'mtools', mcopy: 'mtools', mdir: 'mtools', mtype: 'mtools' };

/** Runs a command-line tool (xorriso, mtools), its last stderr lines in the error. */
export function run(cmd: string, args: string[], timeoutMs: number): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: timeoutMs, maxBuffer: 4 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error) {
        const e = error as NodeJS.ErrnoException & { killed?: boolean };
        reject(new Error(e.code === 'ENOENT' ? `${cmd} is not installed (Debian package ${PACKAGE_OF[cmd] ?? cmd})` : `${cmd} failed${e.killed ? ' (timed out)' : ''}: ${String(stderr).trim().split('\n').slice(-3).join(' | ') || e.message}`));
      } else resolve({ stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

/**
 * Characters a boot argument may hold so that isolinux and GRUB hand the kernel the very same
 * bytes: GRUB's script lexer gives `$ ; | & < > ' " \ { } ( ) # *` and blanks meanings, and its
 * linux loader re-quotes arguments with blanks, quotes or backslashes; isolinux passes the append
 * line through as it is.
 */
const SAFE_BOOT_ARG = /^[A-Za-z0-9_.,:=/+@%-]+$/;

/**
 * The installer kernel's command line after the initrds (the job's boot arguments): the one source
 * that isolinux.cfg's `append` and grub.cfg's `linux` line both write, so the two cannot drift.
 */
export function installerCommandLine(preseed: Pick<Preseed, 'bootArgs'>): string {
  for (const arg of preseed.bootArgs) {
    if (!SAFE_BOOT_ARG.test(arg)) throw new Error(`a boot argument the boot loaders would not pass alike: ${JSON.stringify(arg)}`);
  }
  return preseed.bootArgs.join(' ');
}

/** isolinux's menu (BIOS): straight into the installer, both initrds, the job's command line. */
export function isolinuxConfig(preseed: Pick<Preseed, 'bootArgs'>): string {
  return [
    'default install', 'prompt 0', 'timeout 0',
    'label install',
    `  kernel ${KERNEL}`,
    `  append initrd=${INITRDS.join(',')} ${installerCommandLine(preseed)}`,
    '',
  ].join('\n');
}

/** GRUB's menu (UEFI), /boot/grub/grub.cfg on the ISO9660 side: the same kernel, initrds and command line. */
export function grubConfig(preseed: Pick<Preseed, 'bootArgs'>): string {
  return [
    'set default=0', 'set timeout=0',
    "menuentry 'Install' {",
    "    echo 'metal: loading the installer'",
    `    linux ${KERNEL} ${installerCommandLine(preseed)}`,
    `    initrd ${INITRDS.join(' ')}`,
    '}',
    '',
  ].join('\n');
}

/**
 * The grub.cfg GRUB reads first, wherever it landed (the FAT image or the ISO9660 disk): the disk
 * it booted from when that carries the marker (the usual case, so another ISO of the same base on
 * another drive is never taken), else the marker searched for; then that disk's /boot/grub/grub.cfg.
 */
function grubRedirect(marker: string): string {
  return [
    '# metal: the job\'s menu is on the ISO9660 side of the medium GRUB booted from',
    `set metal_marker=${marker}`,
    'regexp --set=1:metal_disk \'^([^,]+)\' "$root"',
    'if [ ! -e "($root)$metal_marker" ]; then',
    '    if [ -n "$metal_disk" -a -e "($metal_disk)$metal_marker" ]; then',
    '        set root="$metal_disk"',
    '    else',
    '        search --no-floppy --file --set=root "$metal_marker"',
    '    fi',
    'fi',
    'echo "metal: the job menu from ($root)"',
    'set prefix=($root)/boot/grub',
    `source ($root)${JOB_GRUB_CFG}`,
    '',
  ].join('\n');
}

interface EfiImage {
  /** The FAT image, and the marker file its redirect looks for on the ISO9660 side. */
  image: Buffer;
  marker: string;
  redirect: string;
}

/** FAT images, one per base image's EFI files (their paths, sizes and times): built once, then reused. */
const efiImages = new Map<string, Promise<EfiImage>>();

async function efiImageOf(efi: NonNullable<BaseImage['efi']>, stage: string, timeoutMs: number): Promise<EfiImage> {
  const files = [efi.grub, ...(efi.shim ? [efi.shim] : [])];
  const stats = await Promise.all(files.map((f) => fs.stat(f)));
  const key = JSON.stringify(files.map((f, i) => [f, stats[i]!.size, stats[i]!.mtimeMs]));
  let entry = efiImages.get(key);
  if (!entry) {
    entry = makeEfiImage(efi, stats.reduce((n, s) => n + s.size, 0), path.join(stage, 'efi'), timeoutMs);
    entry.catch(() => efiImages.delete(key));
    efiImages.set(key, entry);
  }
  return entry;
}

async function makeEfiImage(efi: NonNullable<BaseImage['efi']>, bytes: number, dir: string, timeoutMs: number): Promise<EfiImage> {
  const grub = await fs.readFile(efi.grub);
  const shim = efi.shim ? await fs.readFile(efi.shim) : null;
  const id = createHash('sha256').update('metal-efi-1\0').update(grub).update(shim ?? '').digest('hex').slice(0, 16);
  const marker = `/.metal-iso-${id}`;
  const redirect = grubRedirect(marker);
  const tree = path.join(dir, 'tree');
  const boot = path.join(tree, 'EFI', 'BOOT');
  await fs.mkdir(boot, { recursive: true });
  // Shim loads \EFI\BOOT\grubx64.efi beside itself; without a shim GRUB is BOOTX64.EFI.
  if (shim) {
    await fs.writeFile(path.join(boot, 'BOOTX64.EFI'), shim);
    await fs.writeFile(path.join(boot, 'grubx64.efi'), grub);
  } else await fs.writeFile(path.join(boot, 'BOOTX64.EFI'), grub);
  for (const place of [...GRUB_CFG_PLACES, 'boot/grub/grub.cfg']) {
    await fs.mkdir(path.dirname(path.join(tree, place)), { recursive: true });
    await fs.writeFile(path.join(tree, place), redirect);
  }
  // FAT (mformat picks FAT12/16 by size) with room for the directories; whole MiB, 512-byte sectors.
  const sectors = Math.ceil((bytes + 512 * 1024) / (1024 * 1024)) * 2048;
  const img = path.join(dir, 'efi.img');
  await run('mformat', ['-i', img, '-C', '-T', String(sectors), '-h', '64', '-s', '32', '-N', id.slice(0, 8), '-v', 'METAL_EFI', '::'], timeoutMs);
  const top = await fs.readdir(tree);
  await run('mcopy', ['-i', img, '-s', '-Q', '-m', ...top.map((t) => path.join(tree, t)), '::/'], timeoutMs);
  const image = await fs.readFile(img);
  await fs.rm(dir, { recursive: true, force: true });
  return { image, marker, redirect };
}

export interface BuiltIso {
  path: string;
  bytes: number;
  ms: number;
  /** Whether the ISO also boots under UEFI (an EFI El Torito image); false: BIOS only, `note` says why. */
  uefi: boolean;
  note?: string;
}

/**
 * Writes the job's ISO to `outPath` (its folder must exist): the base kernel and initrd, the job's
 * preseed initrd, an isolinux menu (BIOS) and a GRUB menu (UEFI) that boot straight into the
 * installer with `bootArgs`. `workDir` holds the small generated files while xorriso runs (removed
 * afterwards).
 */
export async function buildInstallerIso(opts: { base: BaseImage; preseed: Preseed; outPath: string; workDir: string; volumeId?: string; timeoutMs?: number }): Promise<BuiltIso> {
  const started = performance.now();
  const { base, preseed } = opts;
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const volumeId = (opts.volumeId ?? 'METAL_INSTALL').toUpperCase().replace(/[^A-Z0-9_]/g, '_').slice(0, 32);
  await fs.mkdir(opts.workDir, { recursive: true, mode: 0o700 });
  const stage = await fs.mkdtemp(path.join(opts.workDir, 'iso-'));
  try {
    const write = async (name: string, content: string | Buffer) => {
      const file = path.join(stage, name);
      await fs.writeFile(file, content, { mode: 0o600 });
      return file;
    };
    const preseedGz = await write('preseed.gz', gzipSync(cpioNewc(preseed.files), { level: 6 }));
    const isolinuxCfg = await write('isolinux.cfg', isolinuxConfig(preseed));
    const grafts = [
      `isolinux/isolinux.bin=${base.isolinuxBin}`, `isolinux/ldlinux.c32=${base.ldlinux}`, `isolinux/isolinux.cfg=${isolinuxCfg}`,
      `${KERNEL.slice(1)}=${base.kernel}`, `${INITRDS[0].slice(1)}=${base.initrd}`, `${INITRDS[1].slice(1)}=${preseedGz}`,
    ];
    const efiBoot: string[] = [];
    let note: string | undefined;
    if (base.efi) {
      const grubCfg = await write('grub.cfg', grubConfig(preseed));
      const efi = await efiImageOf(base.efi, stage, timeoutMs);
      const [image, redirect, marker] = await Promise.all([write('efi.img', efi.image), write('redirect.cfg', efi.redirect), write('marker', `${efi.marker}\n`)]);
      grafts.push(`${EFI_IMAGE}=${image}`, `${JOB_GRUB_CFG.slice(1)}=${grubCfg}`, `${efi.marker.slice(1)}=${marker}`, ...GRUB_CFG_PLACES.map((p) => `${p}=${redirect}`));
      efiBoot.push('-eltorito-alt-boot', '-e', EFI_IMAGE, '-no-emul-boot', ...(base.isohybridMbr ? ['-isohybrid-gpt-basdat'] : []));
    } else {
      note = 'BIOS only: the base image has no grubx64.efi, so there is no UEFI boot image';
    }
    const tmpOut = `${opts.outPath}.partial`;
    await fs.rm(tmpOut, { force: true });
    await run('xorriso', [
      '-as', 'mkisofs', '-quiet', '-o', tmpOut, '-V', volumeId, '-J', '-R',
      '-b', 'isolinux/isolinux.bin', '-c', 'isolinux/boot.cat', '-no-emul-boot', '-boot-load-size', '4', '-boot-info-table',
      ...efiBoot,
      ...(base.isohybridMbr ? ['-isohybrid-mbr', base.isohybridMbr] : []),
      '-graft-points', ...grafts,
    ], timeoutMs);
    await fs.chmod(tmpOut, 0o600);
    await fs.rename(tmpOut, opts.outPath);
    const { size } = await fs.stat(opts.outPath);
    return { path: opts.outPath, bytes: size, ms: performance.now() - started, uefi: Boolean(base.efi), ...(note ? { note } : {}) };
  } finally {
    await fs.rm(stage, { recursive: true, force: true });
  }
}
