import { sushySuite } from './helpers/sushy-suite';

// HTTPS (SUSHY_TLS=1, TLS 1.2 only) with the emulator's self-signed certificate given as driverOptions.caCert.
sushySuite(true);
