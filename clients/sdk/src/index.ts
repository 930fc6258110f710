/**
 * @metal-control-plane/sdk: typed documents for every operation of the service (./generated, made
 * by graphql-codegen from schema/schema.graphql) and a small client around them.
 */
export * from './generated';
export { MetalClient, CSRF_HEADER, type MetalClientOptions, type SubscribeOptions, type Transport, type ConnectionPage } from './client';
export { MetalError, isMetalError, type GraphQLErrorLike } from './errors';
