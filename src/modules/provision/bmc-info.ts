import type { Runner } from '../metal/node-store';

/**
 * The control-node record of a node (bmc_info: its vendor, installed system and OS credentials by
 * broker reference), as provision and the install workflow write it.
 */

/** The node's control-node record at provision: its vendor and installed system, the OS credentials by broker reference. */
export async function recordControlNodeOs(tx: Pick<Runner, 'query'>, nodeId: string, tenantId: string, vendor: string, hostname: string | null, osUsername: string, ref: string): Promise<void> {
  await tx.query(
    `INSERT INTO bmc_info (node_id, tenant_id, vendor, os_hostname, os_username, os_credentials_ref) VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (node_id) DO UPDATE SET vendor = EXCLUDED.vendor, os_hostname = EXCLUDED.os_hostname, os_username = EXCLUDED.os_username,
       os_credentials_ref = EXCLUDED.os_credentials_ref, version = bmc_info.version + 1, updated_at = now()`,
    [nodeId, tenantId, vendor, hostname, osUsername, ref],
  );
}

/** What the installed system's first boot tells of it (the install workflow's first-boot step). */
export interface InstalledOs { nodeId: string; tenantId: string; osIp: string; hostname: string | null; osUsername: string }

/** Records the installed system's address, name and user once it booted. */
export async function recordInstalledOs(db: Pick<Runner, 'query'>, os: InstalledOs): Promise<void> {
  await db.query(
    `INSERT INTO bmc_info (node_id, tenant_id, os_ip, os_hostname, os_username) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (node_id) DO UPDATE SET os_ip = EXCLUDED.os_ip, os_hostname = EXCLUDED.os_hostname, os_username = EXCLUDED.os_username,
       version = bmc_info.version + 1, updated_at = now()`,
    [os.nodeId, os.tenantId, os.osIp, os.hostname, os.osUsername],
  );
}
