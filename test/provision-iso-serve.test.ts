import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { capturingLogger, startTestApp, type TestApp } from './helpers/app';
import { AppError } from '../src/errors';
import { parseRange } from '../src/http/file';
import { confinedPath, publishIso, revokeIsos } from '../src/modules/provision/iso-store';
import { hashToken } from '../src/auth/tokens';

/**
 * Installer ISOs served to BMCs (issue 11 item 3): an unguessable per-job URL that stops working
 * when the job ends, answered with 206 to the Range requests BMCs mount virtual media with; and
 * client-supplied paths that never leave ISO_DIR.
 */

describe('Range (RFC 9110) as BMCs send it', () => {
  it.each([
    ['bytes=0-99', 1000, { start: 0, end: 99 }],
    ['bytes=900-', 1000, { start: 900, end: 999 }],
    ['bytes=-100', 1000, { start: 900, end: 999 }],
    ['bytes=-5000', 1000, { start: 0, end: 999 }],
    ['bytes=990-2000', 1000, { start: 990, end: 999 }],
    ['bytes=1000-', 1000, 'unsatisfiable'],
    ['bytes=-0', 1000, 'unsatisfiable'],
    ['bytes=5-1', 1000, 'none'],
    ['bytes=0-1,5-9', 1000, 'none'],
    ['items=0-1', 1000, 'none'],
    ['bytes=-', 1000, 'none'],
    [undefined, 1000, 'none'],
  ] as const)('%s of %i bytes', (header, size, expected) => {
    expect(parseRange(header, size)).toEqual(expected);
  });
});

describe('the ISO URL (a running service)', () => {
  let t: TestApp;
  let isoDir: string;
  let content: Buffer;
  const lines: string[] = [];
  beforeAll(async () => {
    isoDir = await fs.mkdtemp(path.join(os.tmpdir(), 'metal-isodir-'));
    t = await startTestApp({ isoDir }, { log: capturingLogger(lines) });
    content = randomBytes(300_000);
    await fs.writeFile(path.join(isoDir, 'job_a.iso'), content);
  });
  afterAll(async () => {
    await t?.stop();
    await fs.rm(isoDir, { recursive: true, force: true });
  });
  const publish = (ttlMs = 60_000, file = 'job_a.iso') => publishIso(t.app.database.sql, isoDir, { file: path.join(isoDir, file), name: 'install.iso', ttlMs });

  it('GET, HEAD and single ranges (206 with Content-Range), 416 past the end, If-Range, several ranges whole', async () => {
    const iso = await publish();
    const url = `${t.url}${iso.urlPath}`;
    const full = await fetch(url);
    expect(full.status).toBe(200);
    expect(full.headers.get('accept-ranges')).toBe('bytes');
    expect(full.headers.get('content-type')).toBe('application/x-iso9660-image');
    expect(Buffer.from(await full.arrayBuffer()).equals(content)).toBe(true);
    const etag = full.headers.get('etag')!;
    const head = await fetch(url, { method: 'HEAD' });
    expect([head.status, head.headers.get('content-length'), (await head.arrayBuffer()).byteLength]).toEqual([200, String(content.length), 0]);
    for (const [range, start, end] of [['bytes=0-2047', 0, 2047], ['bytes=32768-65535', 32768, 65535], ['bytes=-4096', content.length - 4096, content.length - 1], ['bytes=299000-', 299000, content.length - 1]] as const) {
      const r = await fetch(url, { headers: { range } });
      expect(r.status).toBe(206);
      expect(r.headers.get('content-range')).toBe(`bytes ${start}-${end}/${content.length}`);
      expect(Buffer.from(await r.arrayBuffer()).equals(content.subarray(start, end + 1))).toBe(true);
    }
    const past = await fetch(url, { headers: { range: `bytes=${content.length}-` } });
    expect([past.status, past.headers.get('content-range')]).toEqual([416, `bytes */${content.length}`]);
    const same = await fetch(url, { headers: { range: 'bytes=0-9', 'if-range': etag } });
    expect(same.status).toBe(206);
    const changed = await fetch(url, { headers: { range: 'bytes=0-9', 'if-range': '"something-else"' } });
    expect(changed.status).toBe(200);
    expect((await changed.arrayBuffer()).byteLength).toBe(content.length);
    const several = await fetch(url, { headers: { range: 'bytes=0-9,20-29' } });
    expect(several.status).toBe(200);
    await several.arrayBuffer();
    const post = await fetch(url, { method: 'POST' });
    expect([post.status, post.headers.get('allow')]).toEqual([405, 'GET, HEAD']);
  });

  it('the URL stops working when revoked or expired; an unknown token gets the very same 404; only the token\'s hash is stored', async () => {
    const iso = await publish();
    const token = iso.urlPath.split('/')[3]!;
    expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const stored = await t.app.database.sql.query('SELECT * FROM installer_iso WHERE id = $1', [iso.id]);
    expect(JSON.stringify(stored.rows[0])).not.toContain(token);
    expect(stored.rows[0]!.token_hash).toBe(hashToken(token));
    expect((await fetch(`${t.url}${iso.urlPath}`)).status).toBe(200);
    expect(await revokeIsos(t.app.database.sql, { id: iso.id })).toBe(1);
    const revoked = await fetch(`${t.url}${iso.urlPath}`);
    const unknown = await fetch(`${t.url}/boot/iso/${randomBytes(32).toString('base64url')}/install.iso`);
    const revokedBody = (await revoked.json()) as { error: { code: string; message: string } };
    const unknownBody = (await unknown.json()) as { error: { code: string; message: string } };
    expect([revoked.status, unknown.status]).toEqual([404, 404]);
    expect(revokedBody.error.message).toBe(unknownBody.error.message);
    const short = await publish(150);
    expect((await fetch(`${t.url}${short.urlPath}`)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 250));
    expect((await fetch(`${t.url}${short.urlPath}`)).status).toBe(404);
    for (const bad of ['/boot/iso/', `/boot/iso/${token}`, `/boot/iso/${token}/install.img`, `/boot/iso/${token}/../install.iso`, '/boot/iso/short/install.iso']) {
      expect((await fetch(`${t.url}${bad}`)).status).toBe(404);
    }
  });

  it('no log line carries an ISO URL\'s token (the only credential a BMC has): requests are logged by the route\'s template', async () => {
    const iso = await publish();
    const token = iso.urlPath.split('/')[3]!;
    expect((await fetch(`${t.url}${iso.urlPath}`, { headers: { range: 'bytes=0-9' } })).status).toBe(206);
    await revokeIsos(t.app.database.sql, { id: iso.id });
    expect((await fetch(`${t.url}${iso.urlPath}`)).status).toBe(404);
    await new Promise((r) => setTimeout(r, 50));
    const logged = lines.filter((l) => l.includes('/boot/iso/'));
    expect(logged.length).toBeGreaterThanOrEqual(2);
    expect(logged.every((l) => l.includes('/boot/iso/{token}/{name}'))).toBe(true);
    expect(lines.join('\n')).not.toContain(token);
  });

  it('a file removed from ISO_DIR is 404, not a crash', async () => {
    await fs.writeFile(path.join(isoDir, 'job_b.iso'), 'x');
    const iso = await publish(60_000, 'job_b.iso');
    await fs.rm(path.join(isoDir, 'job_b.iso'));
    expect((await fetch(`${t.url}${iso.urlPath}`)).status).toBe(404);
  });
});

describe('client-supplied paths stay inside ISO_DIR', () => {
  let isoDir: string;
  let outside: string;
  beforeAll(async () => {
    isoDir = await fs.mkdtemp(path.join(os.tmpdir(), 'metal-confine-'));
    outside = await fs.mkdtemp(path.join(os.tmpdir(), 'metal-outside-'));
    await fs.mkdir(path.join(isoDir, 'cache'));
    await fs.symlink(outside, path.join(isoDir, 'escape'));
  });
  afterAll(async () => {
    await fs.rm(isoDir, { recursive: true, force: true });
    await fs.rm(outside, { recursive: true, force: true });
  });

  it.each([
    ['cache', 'cache'],
    ['cache/debian-12', path.join('cache', 'debian-12')],
    ['jobs/x/out.iso', path.join('jobs', 'x', 'out.iso')],
    ['./a/../b.iso', 'b.iso'],
  ])('%s is %s under ISO_DIR', async (value, rel) => {
    expect(await confinedPath('cache_dir', value, isoDir)).toBe(path.join(isoDir, rel));
  });

  it('an absolute path inside ISO_DIR is taken', async () => {
    expect(await confinedPath('output_iso', path.join(isoDir, 'a.iso'), isoDir)).toBe(path.join(isoDir, 'a.iso'));
  });

  it.each([
    ['../etc/passwd'], ['/etc/passwd'], ['a/../../x'], ['escape/x.iso'], ['escape'], [''], ['.'], ['a\u0000b'], ['a\ud800b'], ['x'.repeat(2000)],
  ])('%j is INVALID_INPUT naming the field', async (value) => {
    const e = await confinedPath('pxe_path', value, isoDir).catch((err: unknown) => err);
    expect(e).toBeInstanceOf(AppError);
    expect([(e as AppError).code, ((e as AppError).extensions.details as { field: string }).field]).toEqual(['INVALID_INPUT', 'pxe_path']);
  });

  it('a value that is not a string is INVALID_INPUT too', async () => {
    for (const value of [42, null, ['a'], { a: 1 }]) {
      await expect(confinedPath('cache_dir', value, isoDir)).rejects.toMatchObject({ code: 'INVALID_INPUT' });
    }
  });
});
