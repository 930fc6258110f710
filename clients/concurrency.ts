/**
 * The one concurrency limiter for a list of work (the SSH fan-out, metalctl's enroll): `fn` runs
 * for each item in the list's order, at most `concurrency` at once; a slot takes the next item as
 * soon as its previous one settles. Once `until()` is true no further item is started (those
 * running finish). A throw from `fn` rejects the whole call, as Promise.all does; callers that
 * must see every item settle catch inside `fn`.
 */
export async function forEachLimited<T>(
  items: readonly T[],
  concurrency: number,
  fn: (item: T, index: number) => Promise<void>,
  opts: { until?: () => boolean } = {},
): Promise<void> {
  let next = 0;
  const slot = async () => {
    while (next < items.length && !opts.until?.()) {
      const index = next++;
      await fn(items[index]!, index);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, slot));
}
