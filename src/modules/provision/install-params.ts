import type { HostnameSource } from './hostname';

/** A control-node install run's params (provision writes them; jobs/workflows/install.ts and the ISO build read them). */
export interface InstallParams {
  verb: 'provision';
  vendor: string;
  /**
   * The installed system's name: the request's, else the default provision chose (NetBox's device
   * name, or node-<serial>); null for a new BMC's job, whose name comes from the serial its
   * enrollment reads (installHostname).
   */
  hostname: string | null;
  hostnameSource?: HostnameSource;
  osUsername: string;
  disks: string[];
  poolType: string;
  nicMac: string | null;
  nicName: string | null;
  gpuPassthrough: unknown;
  /** Where the installer calls back: the request's controlnode_host/port, else PUBLIC_URL. */
  callbackBase: string | null;
  stuckSeconds: number;
  role: string;
  /** Static addressing (prefix_id: an address NetBox allocated); absent, DHCP on the chosen NIC. */
  network?: { mode: 'static'; address: string; prefixLength: number; gateway: string; nameservers: string[] };
  netboxIpId?: number;
}
