import fs from 'node:fs/promises';
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
