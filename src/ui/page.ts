import fs from 'node:fs';
import { fromRoot } from '../paths';
import { StaticAssets } from '../http/static';

/**
 * The status page at /ui: what the fleet is doing, live, for an operator with a token and a
 * browser. Its script is src/ui/client/status.ts, compiled by `npm run build` (its own tsconfig,
 * with the DOM library) into dist/src/ui/client/status.js and served from here with the style
 * sheet below: nothing comes from another origin (no CDN, no font), so it works where the internet
 * is not. It reads only the public API (GraphQL queries and the `events` subscription over SSE,
 * both with the token in the Authorization header), never the database.
 */

/** Where `npm run build` writes the page's script (tsc -p src/ui/client/tsconfig.json). */
export const STATUS_SCRIPT = fromRoot('dist', 'src', 'ui', 'client', 'status.js');

const CSS = `:root{color-scheme:light dark;--fg:#1b1f24;--bg:#fff;--mute:#5c6670;--line:#d6dbe0;--bad:#b3261e;--ok:#1a7f37;--run:#0b61a4;--card:#f6f8fa}
@media (prefers-color-scheme:dark){:root{--fg:#e6e9ec;--bg:#0f1215;--mute:#9aa4ae;--line:#2c333a;--bad:#ff7b72;--ok:#56d364;--run:#58a6ff;--card:#161b22}}
*{box-sizing:border-box}
body{margin:0;font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--fg);background:var(--bg)}
header{display:flex;gap:1em;align-items:center;padding:.6em 1em;border-bottom:1px solid var(--line);flex-wrap:wrap}
header h1{font-size:1.1em;margin:0}
#conn{font-size:.9em;color:var(--mute)}
#conn.live{color:var(--ok)}#conn.down{color:var(--bad)}
header button{margin-left:auto}
main{padding:0 1em 2em;display:grid;gap:1em;grid-template-columns:repeat(auto-fit,minmax(34em,1fr))}
section{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:.5em .8em;min-width:0;overflow-x:auto}
section.wide{grid-column:1/-1}
h2{font-size:1em;margin:.3em 0 .5em}
h2 small{color:var(--mute);font-weight:normal}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{text-align:left;padding:.2em .5em;border-bottom:1px solid var(--line);vertical-align:top}
th{font-weight:600;color:var(--mute)}
th.n,td.n{text-align:right}
td{white-space:nowrap}td.err{white-space:pre-wrap;min-width:12em}
.failed{color:var(--bad)}.good{color:var(--ok)}.running{color:var(--run)}
.err{font-family:ui-monospace,monospace;font-size:.9em;white-space:pre-wrap;word-break:break-word}
.mute{color:var(--mute)}
progress{width:8em;vertical-align:middle}
form{padding:2em;max-width:40em}
form input{width:100%;font:inherit;padding:.4em;margin:.5em 0}
`;

export const uiAssets: StaticAssets = new StaticAssets('/ui/assets/', {
  'status.css': { type: 'text/css; charset=utf-8', load: () => CSS },
  'status.js': {
    type: 'text/javascript; charset=utf-8',
    load: () => {
      try {
        return fs.readFileSync(STATUS_SCRIPT);
      } catch {
        throw new Error(`${STATUS_SCRIPT} is missing: run \`npm run build\` (it compiles the status page's script)`);
      }
    },
  },
});

/**
 * What /ui may do: its own script and style sheet, and requests to this service (the GraphQL
 * queries and the event stream). No other origin, no inline script or style, no frames, no forms
 * posted anywhere (the token form is handled by the script).
 */
export const UI_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** The HTML of /ui: a shell the script fills in. */
export async function uiPage(): Promise<string> {
  const [css, js] = await Promise.all([uiAssets.href('status.css'), uiAssets.href('status.js')]);
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Metal control plane status</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${css}">
<script type="module" src="${js}"></script>
</head>
<body>
<noscript><p>This page needs JavaScript: it reads the GraphQL API at <a href="/graphql">/graphql</a> and its event stream.</p></noscript>
<div id="app"></div>
</body>
</html>
`;
}
