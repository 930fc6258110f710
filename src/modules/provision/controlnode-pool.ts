import { visibleTo } from '../../auth/decide';
import type { Principal } from '../../auth/permissions';
import { AppError } from '../../errors';
import { poolResource } from '../tenancy/resources';

/**
 * compute:nodes:provision on CONTROLNODE_POOL_ID's pool, for register and provision (a new BMC
 * address). A caller of another tenant hears NOT_FOUND without the pool's id (issue 21 item 10):
 * the id is another tenant's, and the configuration's, not the caller's to learn. A caller of the
 * pool's tenant without the permission hears PERMISSION_DENIED, as everywhere.
 */
export function decideOnControlnodePool(principal: Principal, pool: { id: string; tenantId: string; siteId: string }): void {
  if (!visibleTo(principal, 'compute:nodes:provision', poolResource(pool))) {
    throw new AppError('NOT_FOUND', 'the control-node pool (CONTROLNODE_POOL_ID) not found: it is not one this token can see');
  }
}
