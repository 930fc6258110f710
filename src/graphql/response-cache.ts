import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import type { Notifications } from '../db/listen';
import type { ExecutionResult } from 'graphql';
import { createInMemoryCache, useResponseCache, type Cache } from '@graphql-yoga/plugin-response-cache';
import type { Plugin } from 'graphql-yoga';
import type { Context } from '../context';
import { bearerToken, type TokenStore } from '../auth/tokens';
import { getSchema } from './schema';
import { cacheDependencies, NEVER_CACHED_FIELDS, selectedTypes } from './cache-dependencies';

/**
 * A read cache for GraphQL query results, per token, that is never knowingly stale:
 * - a trigger on every table a cached query reads NOTIFYs "metal_cache" with the table's name on
 *   commit, whoever wrote; every process LISTENs and drops the cached results that hold a type
 *   computed from that table (the mapping is derived in cache-dependencies.ts, and a test checks
 *   it against the triggers in the database);
 * - each stored result is tagged with every type its document selects, not only the objects with
 *   an id that the plugin records;
 * - a result computed while an invalidation arrived is not stored (it may have read old rows);
 * - when the LISTEN connection drops, everything is dropped and nothing is cached until it is back.
 * The only staleness left is the notification's flight time after a commit (milliseconds).
 * Authentication runs before the cache is consulted, so a revoked token never reads from it.
 */
export class ResponseCache implements Cache {
  private store = createInMemoryCache({ max: 5000 });
  private generation = 0;
  private started = new Map<string, number>();
  /** The types each pending request's document selects, by cache key (set when the key is built). */
  private selected = new Map<string, string[] | null>();
  private selectedByDocument = new Map<string, string[] | null>();
  private listening = false;
  private subscription: { stop(): void } | null = null;
  private readonly typesByTable = cacheDependencies(getSchema()).typesByTable;

  constructor(private notifications: Notifications, private log: Logger, readonly ttlMs: number) {}

  /** Caches only while the process's LISTEN connection is up: a change it did not hear of would be served stale. */
  async start(): Promise<void> {
    this.subscription = await this.notifications.subscribe('metal_cache', (table) => this.onTableChanged(table), {
      lost: () => {
        this.log.warn('the cache lost its LISTEN connection; caching is off until it is back');
        this.goDeaf();
      },
      back: () => { this.listening = true; },
    });
    this.listening = this.notifications.listening;
  }

  private goDeaf(): void {
    this.listening = false;
    this.generation += 1;
    // Every stored result holds its root type, so this drops them all.
    void this.store.invalidate([{ typename: 'Query' }]);
  }

  private onTableChanged(table: string): void {
    const types = this.typesByTable.get(table);
    // A table no cached type is computed from must not refuse to store results computed meanwhile.
    if (!types) return;
    this.generation += 1;
    void this.store.invalidate(types.map((typename) => ({ typename })));
  }

  async get(key: string): Promise<ExecutionResult | undefined> {
    const hit = await this.store.get(key);
    if (hit) this.selected.delete(key);
    if (!hit && !this.started.has(key)) {
      if (this.started.size > 10000) this.started.clear(); // results that were never stored (errors)
      this.started.set(key, this.generation);
    }
    return hit ?? undefined;
  }

  set(key: string, result: ExecutionResult, entities: Iterable<{ typename: string; id?: string | number }>, ttl: number): void | Promise<void> {
    const startedAt = this.started.get(key);
    const types = this.selected.get(key);
    this.started.delete(key);
    this.selected.delete(key);
    if (!this.listening || startedAt === undefined || startedAt !== this.generation || !types) return;
    return this.store.set(key, result, [...entities, ...types.map((typename) => ({ typename }))], ttl);
  }

  invalidate(entities: Iterable<{ typename: string; id?: string | number }>): void | Promise<void> {
    this.generation += 1;
    return this.store.invalidate(entities);
  }

  /** The plugin's own key (document, operation, variables, session), remembering what it selects. */
  private key(documentString: string, operationName: string | null | undefined, variables: unknown, session: string | null | undefined): string {
    let types = this.selectedByDocument.get(documentString);
    if (types === undefined) {
      try {
        types = selectedTypes(getSchema(), documentString);
      } catch {
        types = null; // not a valid document: it fails before anything could be stored
      }
      if (this.selectedByDocument.size > 1000) this.selectedByDocument.clear();
      this.selectedByDocument.set(documentString, types);
    }
    const key = createHash('sha256').update(JSON.stringify([documentString, operationName ?? '', variables ?? {}, session ?? ''])).digest('hex');
    if (this.selected.size > 10000) this.selected.clear(); // keys of requests that stored nothing
    this.selected.set(key, types);
    return key;
  }

  /**
   * Yoga's plugin answers from the cache before the context (and so authentication) is built, so the
   * session is decided here from the bearer token itself: a token that does not authenticate gets
   * the anonymous session, which only ever holds results computed without a principal.
   */
  plugin(tokens: TokenStore): Plugin {
    return useResponseCache<Context>({
      cache: this,
      ttl: this.ttlMs,
      ttlPerSchemaCoordinate: Object.fromEntries(Object.keys(NEVER_CACHED_FIELDS).map((coordinate) => [coordinate, 0])),
      session: async (request) => {
        try {
          const token = bearerToken(request.headers.get('authorization'));
          return token ? (await tokens.authenticate(token)).tokenId : null;
        } catch {
          return null;
        }
      },
      buildResponseCacheKey: ({ documentString, operationName, variableValues, sessionId }) => this.key(documentString, operationName, variableValues, sessionId),
      // Conditional requests (If-None-Match) are answered before any of this: never from the cache.
      enabled: (request) => !request.headers.has('if-none-match'),
      // Mutations answer from the database; their results also invalidate what they touched.
      invalidateViaMutation: true,
      includeExtensionMetadata: false,
    }) as Plugin;
  }

  async stop(): Promise<void> {
    this.listening = false;
    this.subscription?.stop();
  }
}
