import fs from 'node:fs';
import path from 'node:path';
import { StaticAssets, type AssetSource } from '../http/static';

/** swagger-ui-dist's folder, found through Node's resolution (no path from a request ever reaches it). */
function swaggerDist(file: string): AssetSource['load'] {
  return () => fs.readFileSync(path.join(path.dirname(require.resolve('swagger-ui-dist/package.json')), file));
}

const JS = 'text/javascript; charset=utf-8';

/**
 * Swagger UI renders /openapi.json on /docs from the files of the swagger-ui-dist package, served
 * here: no CDN, no validator badge (validatorUrl: null, else every view asks validator.swagger.io),
 * no standalone preset (its top bar only loads other URLs).
 */
export const docsAssets: StaticAssets = new StaticAssets('/docs/assets/', {
  'swagger-ui.css': { type: 'text/css; charset=utf-8', load: swaggerDist('swagger-ui.css') },
  'swagger-ui-bundle.js': { type: JS, load: swaggerDist('swagger-ui-bundle.js') },
  'favicon-32x32.png': { type: 'image/png', load: swaggerDist('favicon-32x32.png') },
  'favicon-16x16.png': { type: 'image/png', load: swaggerDist('favicon-16x16.png') },
  // A served file rather than an inline script, so the page's Content-Security-Policy allows 'self' only.
  'docs-init.js': {
    type: JS,
    load: () => `'use strict';
window.addEventListener('DOMContentLoaded', function () {
  window.ui = SwaggerUIBundle({
    url: '/openapi.json',
    dom_id: '#swagger-ui',
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis],
    layout: 'BaseLayout',
    deepLinking: true,
    docExpansion: 'list',
    defaultModelsExpandDepth: 0,
    displayOperationId: true,
    displayRequestDuration: true,
    tryItOutEnabled: false,
    persistAuthorization: false,
  });
});
`,
  },
});

/**
 * What /docs may load: its own files and /openapi.json. Swagger UI sets styles inline and draws its
 * icons as data: images; nothing else, and no other origin.
 */
export const DOCS_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

/** The /docs page: Swagger UI over /openapi.json; without JavaScript, a pointer to the document. */
export async function docsPage(): Promise<string> {
  const [css, bundle, init, icon32, icon16] = await Promise.all(
    ['swagger-ui.css', 'swagger-ui-bundle.js', 'docs-init.js', 'favicon-32x32.png', 'favicon-16x16.png'].map((name) => docsAssets.href(name)),
  );
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Metal control plane REST API</title>
<link rel="stylesheet" href="${css}">
<link rel="icon" type="image/png" href="${icon32}" sizes="32x32">
<link rel="icon" type="image/png" href="${icon16}" sizes="16x16">
</head>
<body>
<noscript><p>This page renders <a href="/openapi.json">/openapi.json</a> (OpenAPI 3.1: every route with its
parameters, body, responses and examples) and needs JavaScript. The full API is GraphQL at <a href="/graphql">/graphql</a>.</p></noscript>
<div id="swagger-ui"></div>
<script src="${bundle}"></script>
<script src="${init}"></script>
</body>
</html>
`;
}
