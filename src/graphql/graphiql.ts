import type { GraphiQLOptions } from 'graphql-yoga';
import { StaticAssets } from '../http/static';

type Bundle = typeof import('@graphql-yoga/render-graphiql/graphiql');

let bundle: Bundle | null = null;
/** The GraphiQL build of @graphql-yoga/render-graphiql (9 MB of strings): loaded on first use only. */
function graphiqlBundle(): Bundle {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return (bundle ??= require('@graphql-yoga/render-graphiql/graphiql') as Bundle);
}

const JS = 'text/javascript; charset=utf-8';

/** Monaco's workers, by the label Monaco asks for (as render-graphiql's own page names them). */
const WORKERS = {
  editorWorkerService: 'editor.worker.js',
  json: 'json.worker.js',
  graphql: 'graphql.worker.js',
} as const;

/**
 * GraphiQL's files, served by this service (@graphql-yoga/render-graphiql bundles them; Yoga's
 * default page loads them from a CDN, and shows only "Loading..." where the internet is not).
 * render-graphiql's own renderGraphiQL inlines all 9 MB into every page and builds blob: workers;
 * served as files they are cached by the browser and the page needs no inline script.
 */
export const graphiqlAssets: StaticAssets = new StaticAssets('/graphiql/assets/', {
  'graphiql.js': { type: JS, load: () => graphiqlBundle().js },
  'graphiql.css': { type: 'text/css; charset=utf-8', load: () => graphiqlBundle().css },
  'favicon.ico': {
    type: 'image/x-icon',
    load: () => {
      const dataUrl = graphiqlBundle().favicon;
      const comma = dataUrl.indexOf(',');
      if (!dataUrl.startsWith('data:') || !dataUrl.slice(0, comma).endsWith(';base64')) throw new Error('render-graphiql favicon is not a base64 data URL');
      return Buffer.from(dataUrl.slice(comma + 1), 'base64');
    },
  },
  [WORKERS.editorWorkerService]: { type: JS, load: () => graphiqlBundle().editorWorkerService },
  [WORKERS.json]: { type: JS, load: () => graphiqlBundle().jsonWorker },
  [WORKERS.graphql]: { type: JS, load: () => graphiqlBundle().graphqlWorker },
  // Runs before graphiql.js, as render-graphiql's inline script does: Monaco reads its environment
  // when it loads. The options travel as JSON in the page, so this file is the same for every page.
  'graphiql-init.js': {
    type: JS,
    load: async () => {
      const workers: Record<string, string> = {};
      for (const [label, file] of Object.entries(WORKERS)) workers[label] = await graphiqlAssets.href(file);
      return `'use strict';
(function () {
  var workers = ${JSON.stringify(workers)};
  self.MonacoEnvironment = { globalAPI: false, getWorkerUrl: function (moduleId, label) { return workers[label]; } };
  // GraphiQL fetches the schema once, at load, with the headers of that moment. Whoever then adds
  // (or changes) a token gets the schema that token sees: fetched again once the headers are
  // valid JSON and have not changed for half a second, as the Re-fetch button would.
  var lastHeaders = null;
  var refetch = null;
  function onEditHeaders(headers) {
    if (headers === lastHeaders) return;
    lastHeaders = headers;
    clearTimeout(refetch);
    refetch = setTimeout(function () {
      try { JSON.parse(headers.trim() === '' ? '{}' : headers); } catch (e) { return; }
      var button = document.querySelector('button[aria-label^="Re-fetch GraphQL schema"]');
      if (button) button.click();
    }, 500);
  }
  document.addEventListener('DOMContentLoaded', function () {
    var options = JSON.parse(document.getElementById('graphiql-options').textContent);
    options.onEditHeaders = onEditHeaders;
    YogaGraphiQL.renderYogaGraphiQL(document.getElementById('root'), options);
  });
})();
`;
    },
  },
});

const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** JSON inside <script type="application/json">: no `<` may close the element early. */
const jsonInScript = (value: unknown) => JSON.stringify(value).replace(/</g, '\\u003c');

/**
 * Yoga's `renderGraphiQL`: the page render-graphiql renders, with its scripts, styles and
 * workers linked from {@link graphiqlAssets} instead of inlined. The options are Yoga's `graphiql`
 * options, unchanged.
 */
export async function renderOfflineGraphiQL(options: GraphiQLOptions): Promise<string> {
  const [init, js, css, favicon] = await Promise.all(
    ['graphiql-init.js', 'graphiql.js', 'graphiql.css', 'favicon.ico'].map((name) => graphiqlAssets.href(name)),
  );
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>${escapeHtml(options.title || 'Yoga GraphiQL')}</title>
<link rel="icon" href="${options.favicon ? escapeHtml(options.favicon) : favicon}">
<link rel="stylesheet" href="${css}">
</head>
<body id="body" class="no-focus-outline">
<noscript>GraphiQL needs JavaScript. Without it, POST GraphQL requests to this URL.</noscript>
<div id="root"></div>
<script type="application/json" id="graphiql-options">${jsonInScript(options)}</script>
<script src="${init}"></script>
<script src="${js}"></script>
</body>
</html>
`;
}
