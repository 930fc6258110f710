import fs from 'node:fs';
import { Argument, InvalidArgumentError, type Command } from 'commander';
import { ControlNodeProvisionDocument, type ControlNodeProvisionMutationVariables, type ProvisionControlNodeInput } from '../../sdk/src';
import { cli, type Cli } from '../context';
import { oneLine, UsageError } from '../errors';
import { jobOutcome, transportOption, watchJob, type Transport } from './jobs';

/**
 * metalctl provision VENDOR --bmc IP ... [--watch]: installs Debian on a control node through its
 * BMC (provisionControlNode: a per-job ISO over virtual media in the vendor's Redfish flavour).
 * The OS password is read from a file (never a flag: argv is visible to every user of the host);
 * without one the service makes a random one and keeps it in its secret broker.
 */

export const VENDORS = ['cisco', 'dell', 'hp', 'lenovo', 'supermicro'] as const;

const int = (name: string) => (value: string): number => {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError(`${name} must be a whole number`);
  return Number(value);
};
const list = (value: string, previous: string[] | undefined): string[] => [...(previous ?? []), ...value.split(',').map((s) => s.trim()).filter(Boolean)];

interface ProvisionOpts {
  bmc: string; hostname?: string; osUser?: string; osPasswordFile?: string; disk?: string[]; poolType?: string;
  nic?: string; nicLegacy?: string; nicMac?: string; mac?: string; prefixId?: number; deviceId?: number; gpuPassthrough?: string;
  controlnodeHost?: string; controlnodePort?: string; debianVersion?: string; arch?: string; location?: string; zone?: string;
  rack?: string; vmSlot?: string; networkRole?: string; k8sClusterName?: string; k8sClusterType?: string; watch?: boolean; transport: Transport;
}

function readSecretFile(file: string, flag: string): string {
  let text: string;
  try {
    if (file !== '-') {
      const mode = fs.statSync(file).mode;
      // Used, but said, as config.ts does for a token file (and ssh for a key).
      if ((mode & 0o077) !== 0) process.stderr.write(`warning: ${flag}: the file can be read by other users (mode ${(mode & 0o777).toString(8)}); chmod 600 it\n`);
    }
    text = file === '-' ? fs.readFileSync(0, 'utf8') : fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new UsageError(`${flag}: cannot read it (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  const value = text.replace(/\r?\n$/, '');
  if (!value) throw new UsageError(`${flag}: the file is empty`);
  return value;
}

async function provision(invocation: Cli, vendor: string, opts: ProvisionOpts): Promise<void> {
  const input: ProvisionControlNodeInput = { bmcIp: opts.bmc };
  const set = <K extends keyof ProvisionControlNodeInput>(key: K, value: ProvisionControlNodeInput[K] | undefined) => {
    if (value !== undefined) input[key] = value;
  };
  set('hostname', opts.hostname);
  set('osUsername', opts.osUser);
  if (opts.osPasswordFile) input.osPassword = readSecretFile(opts.osPasswordFile, '--os-password-file');
  set('selectedDisks', opts.disk);
  set('poolType', opts.poolType);
  set('selectedNic', opts.nic);
  set('selectedNicLegacy', opts.nicLegacy);
  set('selectedNicMac', opts.nicMac);
  set('macAddress', opts.mac);
  set('prefixId', opts.prefixId);
  set('deviceId', opts.deviceId);
  if (opts.gpuPassthrough !== undefined) {
    try {
      input.gpuPassthrough = JSON.parse(opts.gpuPassthrough);
    } catch {
      throw new UsageError('--gpu-passthrough: must be JSON (true, or {"iommu":"intel","pci_ids":["10de:2204"]})');
    }
  }
  set('controlnodeHost', opts.controlnodeHost);
  set('controlnodePort', opts.controlnodePort);
  set('debianVersion', opts.debianVersion);
  set('arch', opts.arch);
  set('location', opts.location);
  set('zone', opts.zone);
  set('rackNumber', opts.rack);
  set('vmSlot', opts.vmSlot);
  set('networkRole', opts.networkRole);
  set('kubernetesClusterName', opts.k8sClusterName);
  set('kubernetesClusterType', opts.k8sClusterType);
  const variables: ControlNodeProvisionMutationVariables = { input, vendor: vendor.toUpperCase() as ControlNodeProvisionMutationVariables['vendor'] };
  const r = (await invocation.client().request(ControlNodeProvisionDocument, variables)).provisionControlNode;
  if (!opts.watch) {
    if (invocation.out.json) return invocation.out.printJson(r);
    invocation.out.line(oneLine(r.message));
    invocation.out.line(`job ${r.jobId} (node ${r.node.id}, ${r.node.provisionState.toLowerCase()}): follow it with \`metalctl jobs watch ${r.jobId}\``);
    return;
  }
  if (invocation.out.json) invocation.out.jsonLine(r);
  else invocation.out.line(oneLine(`${r.message}: job ${r.jobId}`));
  jobOutcome(await watchJob(invocation, r.jobId, opts.transport));
}

export function register(program: Command): void {
  program.command('provision')
    .description('installs Debian on a control node through its BMC (a per-job ISO over virtual media); --watch follows the job')
    .addArgument(new Argument('<vendor>', 'the BMC\'s Redfish flavour').choices(VENDORS))
    .requiredOption('--bmc <ip>', 'the node\'s BMC address')
    .option('--hostname <name>', 'the installed system\'s host name (default: NetBox\'s device name, else node-<serial>)')
    .option('--os-user <name>', 'the OS user (default debian; it gets sudo, root cannot log in)')
    .option('--os-password-file <file>', 'the OS user\'s password from this file (- = stdin); default: a random one kept by the service')
    .option('--disk <name>', 'a disk for the root (nvme0n1, sda, /dev/disk/by-id/...); repeatable or comma-separated', list)
    .option('--pool-type <type>', 'mirror, raidz1, raidz2, stripe or single')
    .option('--nic <name>', 'the NIC by name, e.g. enp0s3')
    .option('--nic-legacy <name>', 'the NIC\'s legacy kernel name, e.g. eth0')
    .option('--nic-mac <mac>', 'the NIC by MAC (preferred over its name)')
    .option('--mac <mac>', 'the machine\'s MAC address')
    .option('--prefix-id <id>', 'a NetBox prefix: the OS gets a static address from it (else DHCP)', int('--prefix-id'))
    .option('--device-id <id>', 'the NetBox device id', int('--device-id'))
    .option('--gpu-passthrough <json>', 'true, or {"iommu":"intel|amd","pci_ids":["vendor:device"]}')
    .option('--controlnode-host <host>', 'where the installer reports (default: the service\'s PUBLIC_URL)')
    .option('--controlnode-port <port>', 'its port')
    .option('--debian-version <v>', 'the Debian release')
    .option('--arch <arch>', 'the architecture')
    .option('--location <loc>', 'location (recorded)')
    .option('--zone <zone>', 'zone (recorded)')
    .option('--rack <rack>', 'rack number (recorded)')
    .option('--vm-slot <slot>', 'VM slot (recorded)')
    .option('--network-role <role>', 'network role (recorded)')
    .option('--k8s-cluster-name <name>', 'Kubernetes cluster name (recorded)')
    .option('--k8s-cluster-type <type>', 'Kubernetes cluster type (recorded)')
    .option('-w, --watch', 'follow the job to its end (exit 1 unless it completed)')
    .addOption(transportOption())
    .action((vendor: string, opts: ProvisionOpts, cmd: Command) => provision(cli(cmd), vendor, opts));
}
