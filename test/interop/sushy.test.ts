import { sushySuite } from './helpers/sushy-suite';

sushySuite(false);
