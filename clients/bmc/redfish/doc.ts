/**
 * Reading Redfish documents as real BMCs serve them: links, collection members (each once),
 * resource ids, and error bodies that some BMCs send with a 200 (which are never resources).
 */
import type { Doc } from './client';

export function link(v: unknown): string | null {
  const id = (v as Doc | null | undefined)?.['@odata.id'];
  return typeof id === 'string' && id ? id : null;
}

/** The members of a collection, each link once (a BMC may list the same member many times). */
export function memberLinks(doc: Doc): string[] {
  return [...new Set(((Array.isArray(doc.Members) ? doc.Members : []) as unknown[]).map(link).filter((x): x is string => x !== null))];
}

/** The last path segment of a resource: its Id as the URL names it (HPE ends every @odata.id with '/'). */
export function lastSegment(p: string): string {
  return p.replace(/\/+$/, '').split('/').pop() ?? p;
}

/**
 * Whether a body is a Redfish error rather than the resource asked for: `error`, or only
 * `@Message.ExtendedInfo` with no `@odata.id`. Some BMCs answer a missing member with such a body
 * and HTTP 200 (issue 20: one Drive link listed 32 times, each an error body, read as 32 disks).
 */
export function isErrorBody(doc: Doc | null | undefined): boolean {
  if (!doc || typeof doc !== 'object') return true;
  if ('error' in doc) return true;
  return '@Message.ExtendedInfo' in doc && typeof doc['@odata.id'] !== 'string' && typeof doc['@odata.type'] !== 'string';
}

/** A trimmed, non-empty string, else null. */
export const str = (v: unknown): string | null => (typeof v === 'string' && v.trim() ? v.trim() : null);
