import { flag, intOption, option, parseBenchArgs } from './bench/read';

describe('the benches\' argument parsing (parseBenchArgs, node:util parseArgs)', () => {
  const parse = (argv: string[]) => parseBenchArgs(argv, ['machines', 'mockup', 'cpu-prof'], ['split', 'pg-stats']);

  it('reads --name value, --name=value and flags; absent options take their defaults', () => {
    const args = parse(['--machines', '200', '--mockup=public-bladed', '--split']);
    expect(intOption(args, 'machines', 1000, 1)).toBe(200);
    expect(option(args, 'mockup')).toBe('public-bladed');
    expect(option(args, 'cpu-prof')).toBeUndefined();
    expect(flag(args, 'split')).toBe(true);
    expect(flag(args, 'pg-stats')).toBe(false);
    expect(intOption(parse([]), 'machines', 1000, 1)).toBe(1000);
  });

  it('refuses, as a usage error, an unknown option, a positional, a value option without its value and a bad integer', () => {
    const usage = (argv: string[]) => {
      try {
        const args = parse(argv);
        intOption(args, 'machines', 1000, 1);
      } catch (error) {
        return error instanceof Error && error.name === 'UsageError' ? error.message : `not a usage error: ${String(error)}`;
      }
      return 'accepted';
    };
    expect(usage(['--machnies', '5'])).toMatch(/--machnies/);
    expect(usage(['lifecycle'])).toMatch(/positional/i);
    expect(usage(['--machines'])).toMatch(/--machines/);
    expect(usage(['--machines', '--split'])).toMatch(/--machines/);
    expect(usage(['--machines', '0'])).toMatch(/--machines must be an integer >= 1/);
    expect(usage(['--split=yes'])).toMatch(/--split/);
  });
});
