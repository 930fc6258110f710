import os from 'node:os';
import { defaultDatabasePoolSize, loadConfig } from '../src/config';
import { connectDatabase } from '../src/db/client';

/** DATABASE_POOL_SIZE: the connections a process keeps to PostgreSQL (docs/configuration.md). */
describe('DATABASE_POOL_SIZE', () => {
  it.each([
    [1, 4],
    [2, 6],
    [16, 34],
    [0, 4],
  ])('defaults to 2 x cores + 2 (%i cores: %i)', (cores, size) => {
    expect(defaultDatabasePoolSize(cores)).toBe(size);
  });

  it('is the default when unset or empty', () => {
    const expected = 2 * os.availableParallelism() + 2;
    expect(loadConfig({}).databasePoolSize).toBe(expected);
    expect(loadConfig({ DATABASE_POOL_SIZE: '' }).databasePoolSize).toBe(expected);
  });

  it.each(['1', '8', '1000'])('takes %s', (raw) => {
    expect(loadConfig({ DATABASE_POOL_SIZE: raw }).databasePoolSize).toBe(Number(raw));
  });

  it.each(['0', '-3', '1.5', 'six', '1001', '99999999999999999999', ' 8x', '\u0000'])('refuses %j, naming the variable', (raw) => {
    expect(() => loadConfig({ DATABASE_POOL_SIZE: raw })).toThrow(/^DATABASE_POOL_SIZE must be an integer/);
  });

  it("is the size of the process's pool (nothing connects until a statement is sent)", async () => {
    const db = connectDatabase('postgresql://nobody@127.0.0.1:1/none', { poolSize: 3 });
    try {
      expect((db.pool as unknown as { options: { max: number } }).options.max).toBe(3);
    } finally {
      await db.close();
    }
    const fallback = connectDatabase('postgresql://nobody@127.0.0.1:1/none');
    try {
      expect((fallback.pool as unknown as { options: { max: number } }).options.max).toBe(defaultDatabasePoolSize());
    } finally {
      await fallback.close();
    }
  });
});
