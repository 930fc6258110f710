import fs from 'node:fs';
import { fromRoot } from '../../paths';
import { POWER_REFUSED, PROVISION_STATES, STATE_DOCS, mermaidDiagram } from './states';

/** docs/provision-states.md, generated from the state table (a test fails when it is stale). */
export function provisionStatesDoc(): string {
  const states = PROVISION_STATES.map((s) => `| \`${s}\` | ${STATE_DOCS[s]} | ${POWER_REFUSED[s] === null ? 'accepted' : `INVALID_STATE: ${POWER_REFUSED[s]}`} |`).join('\n');
  return `# Provision states

Generated from \`src/modules/metal/states.ts\` by \`npm run docs:states\`; do not edit by hand.

\`\`\`mermaid
${mermaidDiagram()}\`\`\`

| state | meaning | power |
| --- | --- | --- |
${states}
`;
}

if (require.main === module) {
  fs.mkdirSync(fromRoot('docs'), { recursive: true });
  fs.writeFileSync(fromRoot('docs', 'provision-states.md'), provisionStatesDoc());
  console.log('wrote docs/provision-states.md');
}
