import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { run } from '../../src/modules/provision/iso';

/** Reading back what an installer ISO carries (test/provision-iso.test.ts). */

/** Reads a newc cpio back (what src/modules/provision/iso.ts's cpioNewc writes). */
export function readCpioNewc(buf: Buffer): { name: string; mode: number; data: Buffer }[] {
  const out: { name: string; mode: number; data: Buffer }[] = [];
  let off = 0;
  const pad4 = (n: number) => (4 - (n % 4)) % 4;
  while (off + 110 <= buf.length) {
    if (buf.toString('ascii', off, off + 6) !== '070701') throw new Error(`not a newc cpio at ${off}`);
    const field = (i: number) => parseInt(buf.toString('ascii', off + 6 + i * 8, off + 14 + i * 8), 16);
    const mode = field(1);
    const size = field(6);
    const nameSize = field(11);
    const name = buf.toString('utf8', off + 110, off + 110 + nameSize - 1);
    off += 110 + nameSize + pad4(110 + nameSize);
    const data = buf.subarray(off, off + size);
    off += size + pad4(size);
    if (name === 'TRAILER!!!') break;
    out.push({ name, mode, data });
  }
  return out;
}

/** A file of an ISO, read back with xorriso. */
export async function extractFromIso(iso: string, inside: string, to: string): Promise<Buffer> {
  await run('xorriso', ['-osirrox', 'on', '-indev', iso, '-extract', inside, to], 60_000);
  return fs.readFile(to);
}

/** One El Torito boot entry as `xorriso -report_el_torito plain` prints it. */
export interface ElToritoReportEntry {
  n: number;
  /** BIOS, UEFI (platform id 0xEF), PPC, Mac or a hex id. */
  platform: string;
  bootable: boolean;
  emulation: string;
  /** Load size in 512-byte sectors, and the image's first 2048-byte block. */
  loadSectors: number;
  lba: number;
  path: string | null;
}

/** The El Torito catalog, read back by xorriso (`-report_el_torito plain`). */
export async function elToritoReport(iso: string): Promise<ElToritoReportEntry[]> {
  const { stdout } = await run('xorriso', ['-indev', iso, '-report_el_torito', 'plain'], 60_000);
  const entries = new Map<number, ElToritoReportEntry>();
  for (const line of stdout.split('\n')) {
    const img = /^El Torito boot img :\s+(\d+)\s+(\S+)\s+([yn])\s+(\S+)\s+\S+\s+\S+\s+(\d+)\s+(\d+)\s*$/.exec(line);
    if (img) entries.set(Number(img[1]), { n: Number(img[1]), platform: img[2]!, bootable: img[3] === 'y', emulation: img[4]!, loadSectors: Number(img[5]), lba: Number(img[6]), path: null });
    const where = /^El Torito img path :\s+(\d+)\s+(\S.*)$/.exec(line);
    if (where && entries.has(Number(where[1]))) entries.get(Number(where[1]))!.path = where[2]!.trim();
  }
  return [...entries.values()];
}

/** One boot entry of an El Torito boot catalog's bytes: its section's platform id (0x00 BIOS, 0xEF UEFI). */
export interface BootCatalogEntry {
  platformId: number;
  bootable: boolean;
  /** 0: no emulation. */
  media: number;
  sectorCount: number;
  lba: number;
}

/** Parses a boot catalog (El Torito 1.0): the validation entry, the default entry, then sections of entries. */
export function readBootCatalog(cat: Buffer): BootCatalogEntry[] {
  if (cat[0] !== 0x01 || cat[30] !== 0x55 || cat[31] !== 0xaa) throw new Error('not an El Torito boot catalog (no validation entry)');
  const entry = (off: number, platformId: number): BootCatalogEntry => ({
    platformId, bootable: cat[off] === 0x88, media: cat[off + 1]!, sectorCount: cat.readUInt16LE(off + 6), lba: cat.readUInt32LE(off + 8),
  });
  const out = [entry(32, cat[1]!)];
  let off = 64;
  while (off + 32 <= cat.length && (cat[off] === 0x90 || cat[off] === 0x91)) {
    const last = cat[off] === 0x91;
    const platformId = cat[off + 1]!;
    const count = cat.readUInt16LE(off + 2);
    off += 32;
    for (let i = 0; i < count; i += 1, off += 32) out.push(entry(off, platformId));
    if (last) break;
  }
  return out;
}

/** The bare paths under a folder of a FAT image (mtools' `mdir -b`, recursive). */
export async function fatList(image: string, dir = '::/'): Promise<string[]> {
  const { stdout } = await run('mdir', ['-i', image, '-b', '-/', dir], 60_000);
  return stdout.split('\n').map((l) => l.trim()).filter(Boolean).map((l) => l.replace(/^::/, ''));
}

/** A file of a FAT image, read with mtools (mcopy -n: binary, as it is). */
export async function fatRead(image: string, inside: string, to: string): Promise<Buffer> {
  await run('mcopy', ['-n', '-i', image, `::${inside}`, to], 60_000);
  return fs.readFile(to);
}

/** How a QEMU boot smoke test boots an ISO: OVMF (UEFI, with Secure Boot and Microsoft's keys enrolled or without) or SeaBIOS. */
export type QemuBootMode = 'uefi' | 'secureboot' | 'bios';

const OVMF = '/usr/share/OVMF';

/**
 * Boots an ISO from a virtual CD in QEMU (packages qemu-system-x86, ovmf; TCG, no network), and
 * every `pollMs` reads the guest's whole memory (QMP pmemsave) until `done(memory, serial)` holds or
 * `deadlineMs` passes. The guest's memory is where a booted installer shows itself without a serial
 * console on its command line: its syslog, the files its initramfs unpacked. Returns the last read.
 */
export async function bootIsoInQemu(opts: { iso: string; mode: QemuBootMode; dir: string; done: (memory: Buffer, serial: string) => boolean; deadlineMs: number; pollMs?: number; memoryMiB?: number }): Promise<{ memory: Buffer; serial: string; seconds: number; done: boolean }> {
  const memoryMiB = opts.memoryMiB ?? 1024;
  await fs.mkdir(opts.dir, { recursive: true });
  const serialFile = path.join(opts.dir, 'serial.log');
  const qmpSock = path.join(opts.dir, 'qmp.sock');
  const dump = path.join(opts.dir, 'memory.bin');
  const args = ['-accel', 'tcg', '-m', String(memoryMiB), '-cdrom', opts.iso, '-nic', 'none', '-display', 'none', '-no-reboot',
    '-serial', `file:${serialFile}`, '-qmp', `unix:${qmpSock},server=on,wait=off`];
  if (opts.mode === 'bios') args.push('-machine', 'q35');
  else {
    const secure = opts.mode === 'secureboot';
    const vars = path.join(opts.dir, 'OVMF_VARS.fd');
    await fs.copyFile(`${OVMF}/${secure ? 'OVMF_VARS_4M.ms.fd' : 'OVMF_VARS_4M.fd'}`, vars);
    args.push('-machine', secure ? 'q35,smm=on' : 'q35', ...(secure ? ['-global', 'driver=cfi.pflash01,property=secure,value=on'] : []),
      '-drive', `if=pflash,format=raw,readonly=on,file=${OVMF}/${secure ? 'OVMF_CODE_4M.secboot.fd' : 'OVMF_CODE_4M.fd'}`, '-drive', `if=pflash,format=raw,file=${vars}`);
  }
  const started = Date.now();
  const qemu = spawn('qemu-system-x86_64', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  qemu.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
  const exited = new Promise<number | null>((resolve) => qemu.on('exit', resolve));
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  try {
    let socket: net.Socket | null = null;
    for (let i = 0; !socket; i += 1) {
      if (qemu.exitCode !== null || i > 200) throw new Error(`qemu did not start: ${stderr.trim()}`);
      socket = await new Promise<net.Socket | null>((resolve) => {
        const s = net.connect(qmpSock, () => resolve(s));
        s.once('error', () => resolve(null));
      });
      if (!socket) await sleep(50);
    }
    let buffered = '';
    const waiting: ((msg: Record<string, unknown>) => void)[] = [];
    socket.on('data', (d: Buffer) => {
      buffered += d.toString();
      let nl: number;
      while ((nl = buffered.indexOf('\n')) >= 0) {
        const msg = JSON.parse(buffered.slice(0, nl)) as Record<string, unknown>;
        buffered = buffered.slice(nl + 1);
        if (('return' in msg || 'error' in msg) && waiting.length) waiting.shift()!(msg);
      }
    });
    const qmp = (execute: string, args?: Record<string, unknown>) => new Promise<Record<string, unknown>>((resolve, reject) => {
      waiting.push((msg) => ('error' in msg ? reject(new Error(`qmp ${execute}: ${JSON.stringify(msg.error)}`)) : resolve(msg)));
      socket!.write(JSON.stringify(args ? { execute, arguments: args } : { execute }) + '\n');
    });
    await qmp('qmp_capabilities');
    let memory = Buffer.alloc(0);
    let serial = '';
    for (;;) {
      await sleep(opts.pollMs ?? 5000);
      if (qemu.exitCode !== null) throw new Error(`qemu stopped (${qemu.exitCode}): ${stderr.trim()}`);
      await qmp('pmemsave', { val: 0, size: memoryMiB * 1024 * 1024, filename: dump });
      memory = await fs.readFile(dump);
      serial = await fs.readFile(serialFile, 'latin1').catch(() => '');
      const done = opts.done(memory, serial);
      if (done || Date.now() - started > opts.deadlineMs) return { memory, serial, seconds: (Date.now() - started) / 1000, done };
    }
  } finally {
    qemu.kill('SIGKILL');
    await exited;
    await fs.rm(dump, { force: true });
  }
}
