import { createHash, randomBytes } from 'node:crypto';
import type { PrismaClient } from '../generated/prisma/client';
import { AppError, unauthenticated } from '../errors';
import { newId } from '../ids';
import type { Grant, Principal } from './permissions';

const TOKEN_PREFIX = 'mcp_';

export function hashToken(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

export function generateToken(): string {
  return TOKEN_PREFIX + randomBytes(32).toString('base64url');
}

/** Parses `Authorization: Bearer <token>`; anything else is UNAUTHENTICATED. */
export function bearerToken(header: string | null | undefined): string | undefined {
  if (!header) return undefined;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (!match) throw unauthenticated('the Authorization header must be "Bearer <token>"');
  return match[1];
}

/**
 * Resolves tokens to principals. Lookups are cached for a short time (TOKEN_CACHE_MS) to keep one
 * SQL round trip off every request; a revoke through this process drops the entry at once, other
 * processes see it within the cache time.
 */
export class TokenStore {
  private cache = new Map<string, { principal: Principal; until: number }>();
  /** One lookup per token at a time: when an entry expires under load, requests share the refresh. */
  private inFlight = new Map<string, Promise<Principal>>();
  constructor(private prisma: PrismaClient, private cacheMs: number) {}

  async authenticate(token: string): Promise<Principal> {
    const hash = hashToken(token);
    const cached = this.cache.get(hash);
    if (cached && cached.until > Date.now()) return cached.principal;
    let lookup = this.inFlight.get(hash);
    if (!lookup) {
      lookup = this.lookup(hash).finally(() => this.inFlight.delete(hash));
      this.inFlight.set(hash, lookup);
    }
    return lookup;
  }

  private async lookup(hash: string): Promise<Principal> {
    const now = Date.now();
    const row = await this.prisma.apiToken.findUnique({ where: { hash }, include: { grants: true } });
    if (!row || row.revokedAt || (row.expiresAt && row.expiresAt.getTime() <= now)) {
      this.cache.delete(hash);
      throw unauthenticated('the token is unknown, revoked or expired');
    }
    const principal: Principal = {
      tokenId: row.id,
      name: row.name,
      tenantId: row.tenantId,
      grants: row.grants.map((g): Grant => ({
        permission: g.permission as Grant['permission'],
        scopeType: g.scopeType,
        scopeId: g.scopeId,
        siteId: g.siteId,
        poolId: g.poolId,
      })),
    };
    if (this.cacheMs > 0) {
      if (this.cache.size > 10000) this.cache.clear();
      this.cache.set(hash, { principal, until: now + this.cacheMs });
    }
    return principal;
  }

  forget(tokenId: string): void {
    this.inFlight.clear(); // a lookup under way may have read the row before the revoke
    for (const [hash, entry] of this.cache) if (entry.principal.tokenId === tokenId) this.cache.delete(hash);
  }

  /** Stores a platform-admin token with this exact value (idempotent). */
  async ensureAdminToken(token: string, name: string): Promise<void> {
    if (!token.trim() || token.length < 16) {
      throw new AppError('INVALID_CONFIG', 'ADMIN_TOKEN must be at least 16 characters');
    }
    const hash = hashToken(token);
    const existing = await this.prisma.apiToken.findUnique({ where: { hash } });
    if (existing) {
      if (existing.revokedAt) throw new AppError('INVALID_CONFIG', `the admin token ${existing.id} was revoked; set a new ADMIN_TOKEN`);
      return;
    }
    const id = newId('ApiToken');
    await this.prisma.apiToken.create({
      data: {
        id,
        name,
        hash,
        tenantId: null,
        grants: { create: [{ id: newId('ApiGrant'), permission: 'admin', scopeType: 'platform', scopeId: null }] },
      },
    }).catch((error: { code?: string }) => {
      // Several processes starting at once with the same ADMIN_TOKEN: one insert wins.
      if (error.code !== 'P2002') throw error;
    });
  }
}
