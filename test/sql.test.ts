import fc from 'fast-check';
import pg from 'pg';
import { parseTextArray, parseTimestamptz } from '../src/db/sql';

/**
 * Rows read by position (Sql.queryArrays: node pages, bulk views) parse timestamptz by position
 * instead of with pg's regular expressions. The result must always be pg's own.
 */
describe('timestamptz parsed by position', () => {
  const pgParse = pg.types.getTypeParser(1184, 'text') as (text: string) => unknown;
  const same = (text: string) => {
    const ours = parseTimestamptz(text);
    const theirs = pgParse(text);
    if (ours instanceof Date && theirs instanceof Date) expect([text, ours.getTime()]).toEqual([text, theirs.getTime()]);
    else expect([text, ours]).toEqual([text, theirs]);
  };

  it('equals pg\'s parser on what PostgreSQL prints, in every time zone and precision', async () => {
    const client = new pg.Client({ connectionString: process.env.METAL_TEST_ADMIN_URL });
    await client.connect();
    try {
      for (const zone of ['UTC', 'Asia/Kolkata', 'America/St_Johns', 'America/Los_Angeles', 'Pacific/Chatham', 'Europe/Lisbon']) {
        await client.query(`SET TimeZone = '${zone}'`);
        const { rows } = await client.query<{ t: string }>(
          `SELECT (timestamptz '1970-01-01 00:00:00+00' + random() * interval '200 years' + (p || ' seconds')::interval)::text AS t
             FROM generate_series(1, 300), unnest(ARRAY['0', '0.5', '0.001', '0.000001', '0.123456']) AS p`,
        );
        const printed = await client.query<{ t: string }>(
          `SELECT x::text AS t FROM unnest(ARRAY[timestamptz '2026-11-30 01:02:03.456Z', timestamptz '2000-02-29 23:59:59.999Z',
             timestamptz '0099-06-01 12:00:00Z', timestamptz '0500-01-01Z', timestamptz '10000-01-01Z', timestamptz '0044-03-15 BC',
             timestamptz 'infinity', timestamptz '-infinity', timestamptz '1883-11-18 12:00:00Z']) AS x`,
        );
        for (const { t } of [...rows, ...printed.rows]) same(t);
      }
    } finally {
      await client.end();
    }
  });

  it('equals pg\'s parser on any string of that shape, well formed or not', () => {
    const two = fc.integer({ min: 0, max: 99 }).map((n) => String(n).padStart(2, '0'));
    const shaped = fc.record({
      year: fc.integer({ min: 0, max: 12000 }).map((n) => String(n).padStart(4, '0')),
      month: two, day: two, hour: two, minute: two, second: two,
      fraction: fc.option(fc.stringMatching(/^\.[0-9]{0,8}$/), { nil: '' }),
      zone: fc.constantFrom('+00', '-08', '+05:30', '-03:30', '+14', '+05:30:15', 'Z', '', ' BC', '+0', '+1:00'),
    }).map((p) => `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}:${p.second}${p.fraction}${p.zone}`);
    fc.assert(fc.property(fc.oneof(shaped, fc.string()), (text) => same(text)), { numRuns: 5000 });
  });

  it('text[] equals pg\'s parser, the empty array included', async () => {
    const client = new pg.Client({ connectionString: process.env.METAL_TEST_ADMIN_URL });
    await client.connect();
    try {
      const { rows } = await client.query<{ a: string }>(
        `SELECT x::text AS a FROM (VALUES ('{}'::text[]), ('{a}'), ('{"a b",NULL,"NULL",""}'), ('{"{",",","\\\\"}'), (ARRAY['52:54:00:00:00:01', '10.0.0.1'])) AS v(x)`);
      const textArray = (pg.types.getTypeParser as (oid: number, format: 'text') => (text: string) => unknown)(1009, 'text');
      for (const { a } of rows) expect([a, parseTextArray(a)]).toEqual([a, textArray(a)]);
      expect(parseTextArray('{}')).toEqual([]);
    } finally {
      await client.end();
    }
  });
});
