import { metalRoutes } from '../modules/metal/routes';
import { tenancyRoutes } from '../modules/tenancy/routes';
import { fabricRoutes } from '../modules/fabric/routes';
import { provisionRoutes } from '../modules/provision/routes';
import type { Route } from './route-kit';

export type { Method, Route, RouteExample, RouteInput } from './route-kit';

/** Every REST route, each module's beside it: metal, tenancy, the control-node fabric, then its provisioning. */
export const routes: Route[] = [...metalRoutes, ...tenancyRoutes, ...fabricRoutes, ...provisionRoutes];
