/**
 * The CLI's own documents for reads the SDK's generated set has no operation for: a command batch
 * and a BMC command by id (node(id) on CommandBatch and Command). Parsed once; the end-to-end tests
 * run them against the real schema (bulk + batch approve, power --wait).
 */
import { parse } from 'graphql';
import type { TypedDocumentNode } from '@graphql-typed-document-node/core';

export interface BatchView {
  id: string;
  poolId: string;
  verb: string;
  reason: string;
  wipe: string | null;
  nodeCount: number;
  digest: string;
  quorum: number;
  approvals: unknown;
  status: string;
  createdAt: string;
  releasedAt: string | null;
}

export const CommandBatchByIdDocument = parse(`
  query CliCommandBatch($id: ID!) {
    node(id: $id) {
      __typename
      ... on CommandBatch { id poolId verb reason wipe nodeCount digest quorum approvals status createdAt releasedAt }
    }
  }
`) as unknown as TypedDocumentNode<{ node: ({ __typename: string } & Partial<BatchView>) | null }, { id: string }>;

export interface CommandView {
  id: string;
  kind: string;
  status: string;
  nodeId: string | null;
  result: unknown;
  createdAt: string;
  claimedAt: string | null;
  expiresAt: string;
}

export const CommandByIdDocument = parse(`
  query CliCommand($id: ID!) {
    node(id: $id) {
      __typename
      ... on Command { id kind status nodeId result createdAt claimedAt expiresAt }
    }
  }
`) as unknown as TypedDocumentNode<{ node: ({ __typename: string } & Partial<CommandView>) | null }, { id: string }>;
