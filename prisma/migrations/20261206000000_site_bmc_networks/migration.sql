-- The networks a site's BMCs may be at (issue 21 item 6): enroll, register and provision refuse a
-- BMC address outside them, so a BMC address is no way into the control plane's own network.
-- Empty: the service-wide BMC_NETWORKS, else the built-in refusals (loopback, link-local,
-- unspecified, multicast, broadcast).
ALTER TABLE "site" ADD COLUMN "bmc_networks" TEXT[] NOT NULL DEFAULT ARRAY[]::TEXT[];
