import { metalRoutes } from '../modules/metal/routes';
import { tenancyRoutes } from '../modules/tenancy/routes';
import { fabricRoutes } from '../modules/fabric/routes';
import type { Route } from './route-kit';

export type { Method, Route, RouteExample, RouteInput } from './route-kit';

/** Every REST route, each module's beside it: metal, tenancy, then the control-node fabric. */
export const routes: Route[] = [...metalRoutes, ...tenancyRoutes, ...fabricRoutes];
