import type { Sql } from '../db/sql';
import type { DomainSnapshot } from './metrics';

/**
 * The domain gauges' one statement (issue 22 item 4), run when /metrics is scraped and at most
 * once per METRICS_CACHE_MS (src/ops/metrics.ts): nodes grouped by site and provision state, the
 * freshest heartbeat of each site's remote agents, fabric jobs by status, and the nodes of the
 * running fabric job by outcome. Every part is a grouped count whose labels are bounded by the
 * service's own lists (states, statuses) and by the sites: no node id, name or message.
 *
 * The node count reads every node row (a sequential scan of a narrow table: about a millisecond
 * per 10,000 nodes); the other tables are small. Never per request: only a scrape runs it.
 */
export const DOMAIN_SQL = `
  SELECT 'node' AS part, site_id AS a, provision_state::text AS b, count(*)::float8 AS v FROM node GROUP BY site_id, provision_state
  UNION ALL
  SELECT 'heartbeat', site_id, NULL, extract(epoch FROM now() - max(last_heartbeat_at))::float8
    FROM site_agent WHERE last_heartbeat_at IS NOT NULL GROUP BY site_id
  UNION ALL
  SELECT 'fabric-job', job_status, NULL, count(*)::float8 FROM fabric_job GROUP BY job_status
  UNION ALL
  SELECT 'fabric-node', CASE WHEN NOT n.finished THEN 'pending' WHEN n.ok THEN 'succeeded' ELSE 'failed' END, NULL, count(*)::float8
    FROM fabric_job_node n JOIN fabric_job j ON j.id = n.job_id WHERE j.job_status = 'running' GROUP BY 2`;

export async function readDomainSnapshot(sql: Sql): Promise<DomainSnapshot> {
  const { rows } = await sql.query(DOMAIN_SQL, []);
  const snapshot: DomainSnapshot = { nodes: [], heartbeats: [], fabricJobs: [], fabricNodes: [] };
  for (const r of rows) {
    const a = r.a as string;
    const v = Number(r.v);
    switch (r.part) {
      case 'node':
        snapshot.nodes.push({ site: a, state: r.b as string, count: v });
        break;
      case 'heartbeat':
        // A heartbeat stamped by a clock ahead of the database's reads as a little in the future.
        snapshot.heartbeats.push({ site: a, ageSeconds: Math.max(0, v) });
        break;
      case 'fabric-job':
        snapshot.fabricJobs.push({ status: a, count: v });
        break;
      case 'fabric-node':
        snapshot.fabricNodes.push({ state: a, count: v });
        break;
    }
  }
  return snapshot;
}
