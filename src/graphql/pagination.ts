import { invalidInput } from '../errors';
import type { Context } from '../context';

/** Page sizes are checked, not clamped: a client asking for 10,000 rows learns the limit. */
export function checkPageArgs(ctx: Context, args: { first?: number | null; last?: number | null }): void {
  const max = ctx.config.maxPageSize;
  for (const name of ['first', 'last'] as const) {
    const value = args[name];
    if (value === null || value === undefined) continue;
    if (value < 1 || value > max) throw invalidInput(name, `must be between 1 and ${max}`);
  }
}
