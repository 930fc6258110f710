import fs from 'node:fs';
import path from 'node:path';
import { fromRoot } from '../src/paths';

/**
 * Every relative link in README.md and docs/*.md points at a file that exists, and a `#anchor` at a
 * heading of that file (GitHub's slugs). Links inside code blocks and code spans are text, not links.
 */

/** GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`; repeats get -1, -2... */
export function slugs(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const line of stripCode(markdown).split('\n')) {
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const text = m[1]!.replace(/\[([^\]]*)\]\([^)]*\)/g, '$1').replace(/`/g, '');
    const base = text.toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** The text without fenced code blocks and code spans (kept as blank lines so line numbers hold). */
function stripCode(markdown: string): string {
  return markdown
    .replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, (block) => block.replace(/[^\n]/g, ''))
    .replace(/`[^`\n]*`/g, '');
}

/** Every inline link and image target `](target)` and reference definition `[x]: target`. */
export function links(markdown: string): { target: string; line: number }[] {
  const out: { target: string; line: number }[] = [];
  stripCode(markdown).split('\n').forEach((text, i) => {
    for (const m of text.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) out.push({ target: m[1]!, line: i + 1 });
    const ref = /^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s|$)/.exec(text);
    if (ref) out.push({ target: ref[1]!, line: i + 1 });
  });
  return out;
}

const files = ['README.md', ...fs.readdirSync(fromRoot('docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];

describe('links in README.md and docs/', () => {
  it('the link reader finds links and anchors, and not in code', () => {
    const md = '# A title\n## Title, again: `x`!\n## A title\nsee [b](b.md#c) and ![i](img.png)\n`[no](x.md)`\n```\n[no](y.md)\n```\n[ref]: ./z.md\n';
    expect(links(md).map((l) => l.target)).toEqual(['b.md#c', 'img.png', './z.md']);
    expect([...slugs(md)]).toEqual(['a-title', 'title-again-', 'a-title-1']);
  });

  it.each(files)('%s: every relative link names an existing file and heading', (file) => {
    const text = fs.readFileSync(fromRoot(file), 'utf8');
    const broken: string[] = [];
    for (const { target, line } of links(text)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:: not this repository's files
      const [rel, anchor] = target.split('#', 2) as [string, string | undefined];
      const resolved = rel === '' ? fromRoot(file) : path.resolve(path.dirname(fromRoot(file)), decodeURIComponent(rel));
      if (!resolved.startsWith(fromRoot()) || !fs.existsSync(resolved)) {
        broken.push(`${file}:${line}: ${target} (no such file)`);
        continue;
      }
      if (anchor !== undefined && resolved.endsWith('.md') && !slugs(fs.readFileSync(resolved, 'utf8')).has(anchor)) {
        broken.push(`${file}:${line}: ${target} (no such heading)`);
      }
    }
    expect(broken).toEqual([]);
  });
});
