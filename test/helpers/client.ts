import net from 'node:net';
import { print, type DocumentNode } from 'graphql';
import type { TypedDocumentNode } from '@graphql-typed-document-node/core';

export interface GqlResult<T> {
  status: number;
  data: T | null | undefined;
  errors?: { message: string; extensions?: { code?: string; [k: string]: unknown }; path?: (string | number)[] }[];
  headers: Headers;
}

/** POSTs a GraphQL operation the way a real client does (JSON, bearer token). */
export async function gql<T = Record<string, any>, V = Record<string, unknown>>(
  baseUrl: string,
  token: string | null,
  document: string | DocumentNode | TypedDocumentNode<T, V>,
  variables?: V,
  headers: Record<string, string> = {},
): Promise<GqlResult<T>> {
  const query = typeof document === 'string' ? document : print(document);
  const response = await fetch(`${baseUrl}/graphql`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...headers,
    },
    body: JSON.stringify({ query, variables }),
  });
  const body = (await response.json()) as { data?: T | null; errors?: GqlResult<T>['errors'] };
  return { status: response.status, data: body.data, errors: body.errors, headers: response.headers };
}

/** The first error's code, or undefined. */
export const codeOf = (result: { errors?: { extensions?: { code?: string } }[] }) => result.errors?.[0]?.extensions?.code;

export interface RestResult {
  status: number;
  body: any;
  headers: Headers;
}

export async function rest(baseUrl: string, token: string | null, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<RestResult> {
  const response = await fetch(`${baseUrl}${path}`, {
    method,
    headers: {
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...headers,
    },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON: keep the text
  }
  return { status: response.status, body: parsed, headers: response.headers };
}

/** Whether anything accepts a TCP connection at the URL's host and port (a server that says it stopped must not). */
export function canConnect(url: string): Promise<boolean> {
  const u = new URL(url);
  return new Promise((resolve) => {
    const s = net.connect(Number(u.port), u.hostname);
    s.once('connect', () => { s.destroy(); resolve(true); });
    s.once('error', () => resolve(false));
  });
}
