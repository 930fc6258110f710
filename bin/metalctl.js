#!/usr/bin/env node
// metalctl's launcher (package.json "bin"): runs the built CLI, dist/clients/cli/main.js.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const main = path.join(__dirname, '..', 'dist', 'clients', 'cli', 'main.js');
if (!fs.existsSync(main)) {
  process.stderr.write(`metalctl: ${path.relative(process.cwd(), main) || main} is missing: run npm run build first\n`);
  process.exit(1);
}
require(main)
  .run(process.argv)
  .then((code) => {
    process.exitCode = code;
    setTimeout(() => process.exit(code), 2000).unref();
  });
