import fs from 'node:fs/promises';

export default async function globalTeardown(): Promise<void> {
  const pg = (globalThis as Record<string, unknown>).__METAL_TEST_PG__ as { stop(): Promise<void>; dir: string } | undefined;
  if (!pg) return;
  await pg.stop();
  await fs.rm(pg.dir, { recursive: true, force: true });
}
