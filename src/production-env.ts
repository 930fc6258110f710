/**
 * Imported first by main.ts, before any library loads: a service started with no NODE_ENV runs in
 * production mode. graphql-js decides at load time; in development mode its `instanceOf` checks
 * cost about a tenth of the execution of a large result (npm run bench -- bulk).
 */
process.env.NODE_ENV ??= 'production';
export {};
