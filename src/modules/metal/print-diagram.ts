import fs from 'node:fs';
import { fromRoot } from '../../paths';
import { POWER_REFUSED, PROVISION_STATES, STABLE_POINT_RUNS, STATE_DOCS, VERBS, mermaidDiagram, type Verb } from './states';
import { chainOf, isDestructive, verbRunKinds, verbSteps } from './step-facts';

/**
 * One row per verb: the runs it starts (and what they chain to), their steps as the workflow
 * definitions name them (destructive ones in bold), and what bulk does with it.
 */
function verbRows(): string {
  const chain = (kinds: readonly string[]) => kinds.map((k) => `\`${k}\``).join(' → ');
  return (Object.keys(VERBS) as Verb[]).map((verb) => {
    const bulk = !VERBS[verb].bulk ? 'not in bulk' : isDestructive(verb) ? 'a quorum batch (approver keys: waits for the quorum)' : 'runs at once, no batch';
    if (verb === 'recover') {
      // Which run depends on where the node failed: each stable point's.
      const points = Object.entries(STABLE_POINT_RUNS).map(([point, kind]) => `${point}: ${chain(chainOf(kind!))}`).join('; ');
      return `| \`${verb}\` | ${points} | the stable point's run's, as above | ${bulk} |`;
    }
    const runs = verbRunKinds(verb);
    const steps = verbSteps(verb).map((s) => (s.destructive ? `**${s.name}**` : s.name)).join(', ');
    return `| \`${verb}\` | ${runs.length ? chain(runs) : 'none'} | ${steps || '—'} | ${bulk} |`;
  }).join('\n');
}

/** docs/provision-states.md, generated from the state table (a test fails when it is stale). */
export function provisionStatesDoc(): string {
  const states = PROVISION_STATES.map((s) => `| \`${s}\` | ${STATE_DOCS[s]} | ${POWER_REFUSED[s] === null ? 'accepted' : `INVALID_STATE: ${POWER_REFUSED[s]}`} |`).join('\n');
  return `# Provision states

Generated from \`src/modules/metal/states.ts\` and the workflow definitions (\`jobs/workflows/\`) by
\`npm run docs:states\`; do not edit by hand.

\`\`\`mermaid
${mermaidDiagram()}\`\`\`

| state | meaning | power |
| --- | --- | --- |
${states}

## Verbs and their workflow steps

Read from the workflow definitions (\`jobs/workflows/\`, through \`src/modules/metal/step-facts.ts\`);
destructive steps (a power change, a ramdisk or installer boot, a wipe) in bold. A bulk call of a
verb with a destructive step records a quorum batch, which waits for the approver quorum when the
pool has approver keys.

| verb | runs | steps | bulk |
| --- | --- | --- | --- |
${verbRows()}
`;
}

if (require.main === module) {
  fs.mkdirSync(fromRoot('docs'), { recursive: true });
  fs.writeFileSync(fromRoot('docs', 'provision-states.md'), provisionStatesDoc());
  console.log('wrote docs/provision-states.md');
}
