import ipaddr from 'ipaddr.js';
import { invalidInput } from '../../errors';
import { sha512Crypt } from './crypt';

/**
 * The Debian installer's preseed for one control-node job (issue 11 item 3), from the provision
 * request's fields, checked first (INVALID_INPUT naming the request's field):
 * - hostname, the OS user and its password as a SHA-512 crypt hash only (`passwd/user-password-crypted`;
 *   root's login is disabled);
 * - the NIC by MAC (BOOTIF on the installer's command line: netcfg takes the interface whose MAC it
 *   names) or by name, DHCP or static addressing;
 * - the chosen disks and `pool_type`. The netboot installer cannot put root on ZFS (OpenZFS's
 *   Debian guide does that from a live system with debootstrap), so the pool type names the
 *   redundancy and the installer realises it with Linux software RAID (md): mirror = RAID1,
 *   raidz1 = RAID5, raidz2 = RAID6, stripe = RAID0, single = one plain disk, with /boot a RAID1
 *   across every chosen disk and GRUB on each. The disk counts are ZFS's: mirror needs 2, raidz1 3,
 *   raidz2 4, single exactly 1.
 * - GPU passthrough: IOMMU on and vfio-pci bound to the given PCI ids, on the installed system's
 *   kernel command line;
 * - early and late commands that report the install's steps to the service, then its completion,
 *   and a first-boot unit that reports the booted OS once: each with the job's own token, which
 *   only this job's ISO carries.
 */

export const POOL_TYPES = ['mirror', 'raidz1', 'raidz2', 'stripe', 'single'] as const;
export type PoolType = (typeof POOL_TYPES)[number];
const MIN_DISKS: Record<PoolType, number> = { mirror: 2, raidz1: 3, raidz2: 4, stripe: 1, single: 1 };
const MD_LEVEL: Record<PoolType, number | null> = { mirror: 1, raidz1: 5, raidz2: 6, stripe: 0, single: null };

export interface PreseedRequest {
  hostname: string;
  domain?: string;
  osUsername: string;
  /** The plain password: hashed here, never written anywhere. */
  osPassword: string;
  disks: string[];
  poolType: PoolType | string;
  /** The NIC: by MAC (preferred) and/or by name; neither: the installer's choice (auto). */
  nicMac?: string | null;
  nicName?: string | null;
  network: { mode: 'dhcp' } | { mode: 'static'; address: string; prefixLength: number; gateway: string; nameservers: string[] };
  gpuPassthrough?: unknown;
  /** Where the installer reports to (the service's public URL), the job and its callback token. */
  callback: { baseUrl: string; jobId: string; token: string };
  /** The BMC address, reported by the first boot with the OS address. */
  bmcIp: string;
  /** Debian mirror host and suite; the defaults are deb.debian.org and bookworm. */
  mirror?: { host: string; directory?: string };
  /** Field names for errors, as the request spells them (snake_case on REST). */
  fields?: Partial<Record<'hostname' | 'osUsername' | 'osPassword' | 'disks' | 'poolType' | 'nicMac' | 'nicName' | 'network' | 'gpuPassthrough', string>>;
}

export interface InitrdFile {
  /** Path inside the installer's initramfs (no leading slash). */
  path: string;
  mode: number;
  content: string;
}

export interface Preseed {
  /** What the ISO's extra initrd holds: preseed.cfg at the root, the job's callback scripts and token under metal/. */
  files: InitrdFile[];
  /** The installer's kernel command line (after the kernel and initrd). */
  bootArgs: string[];
  /** The crypt hash written for the user. */
  passwordHash: string;
}

const HOST_LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/i;
const USERNAME = /^[a-z_][a-z0-9_-]{0,31}$/;
const RESERVED_USERS = new Set(['root', 'daemon', 'bin', 'sys', 'sync', 'games', 'man', 'lp', 'mail', 'news', 'uucp', 'proxy', 'www-data', 'backup', 'list', 'irc', 'nobody', 'systemd-network', 'messagebus', 'sshd']);
const DISK = /^(\/dev\/(disk\/by-(id|path|uuid)\/)?)?[A-Za-z0-9][A-Za-z0-9._:+-]{0,127}$/;
const MAC = /^([0-9a-f]{2}[:-]){5}[0-9a-f]{2}$/i;
const NIC_NAME = /^[a-zA-Z][a-zA-Z0-9._-]{0,14}$/;
const PCI_ID = /^[0-9a-f]{4}:[0-9a-f]{4}$/i;
const TOKEN = /^[A-Za-z0-9_-]{16,128}$/;
const JOB_ID = /^[A-Za-z0-9_-]{1,128}$/;

/** The request's name of a field (snake_case on REST), for errors. */
const field = (request: Pick<PreseedRequest, 'fields'>, name: keyof NonNullable<PreseedRequest['fields']>) => request.fields?.[name] ?? name;

/** A chosen disk as a device path: nvme0n1 -> /dev/nvme0n1; by-id paths stay. */
export const devicePath = (disk: string) => (disk.startsWith('/dev/') ? disk : `/dev/${disk}`);

/** The n-th partition of a disk: /dev/sda -> /dev/sda2, /dev/nvme0n1 -> /dev/nvme0n1p2, by-id -> -part2. */
export function partitionPath(disk: string, n: number): string {
  const dev = devicePath(disk);
  if (dev.startsWith('/dev/disk/')) return `${dev}-part${n}`;
  return /\d$/.test(dev) ? `${dev}p${n}` : `${dev}${n}`;
}

/** Checks the disks against the pool type (the counts are ZFS's), naming the field. */
export function checkDisks(request: Pick<PreseedRequest, 'disks' | 'poolType' | 'fields'>): { disks: string[]; poolType: PoolType } {
  if (!(POOL_TYPES as readonly string[]).includes(request.poolType)) throw invalidInput(field(request, 'poolType'), `must be one of ${POOL_TYPES.join(', ')}`);
  const poolType = request.poolType as PoolType;
  if (!Array.isArray(request.disks) || request.disks.length === 0) throw invalidInput(field(request, 'disks'), 'must name at least one disk');
  if (request.disks.length > 64) throw invalidInput(field(request, 'disks'), 'may name at most 64 disks');
  const seen = new Set<string>();
  for (const [i, d] of request.disks.entries()) {
    if (typeof d !== 'string' || !DISK.test(d)) throw invalidInput(`${field(request, 'disks')}[${i}]`, 'must be a disk name (nvme0n1, sda) or a /dev/disk/by-id path');
    const dev = devicePath(d);
    if (seen.has(dev)) throw invalidInput(`${field(request, 'disks')}[${i}]`, 'is listed twice (the same device as an earlier entry)');
    seen.add(dev);
  }
  const min = MIN_DISKS[poolType];
  if (request.disks.length < min) throw invalidInput(field(request, 'poolType'), `${poolType} needs at least ${min} disks; ${request.disks.length} chosen`);
  if (poolType === 'single' && request.disks.length !== 1) throw invalidInput(field(request, 'poolType'), `single takes exactly one disk; ${request.disks.length} chosen (stripe spans several)`);
  return { disks: request.disks, poolType };
}

/** IOMMU and vfio-pci arguments from gpu_passthrough: true, or { iommu: intel|amd, pci_ids: [...] }. */
export function gpuKernelArgs(value: unknown, name = 'gpuPassthrough'): string[] {
  if (value === undefined || value === null || value === false) return [];
  if (value === true) return ['intel_iommu=on', 'amd_iommu=on', 'iommu=pt'];
  if (typeof value !== 'object' || Array.isArray(value)) throw invalidInput(name, 'must be true, false or an object { iommu: "intel" | "amd", pci_ids: ["10de:2330", ...] }');
  const v = value as Record<string, unknown>;
  for (const k of Object.keys(v)) if (!['iommu', 'pci_ids', 'pciIds', 'enabled'].includes(k)) throw invalidInput(`${name}.${k}`, 'is not a known field (iommu, pci_ids, enabled)');
  if (v.enabled === false) return [];
  const iommu = v.iommu ?? 'intel';
  if (iommu !== 'intel' && iommu !== 'amd') throw invalidInput(`${name}.iommu`, 'must be intel or amd');
  const ids = v.pci_ids ?? v.pciIds ?? [];
  if (!Array.isArray(ids) || ids.length > 32) throw invalidInput(`${name}.pci_ids`, 'must be a list of at most 32 PCI vendor:device ids');
  for (const [i, id] of ids.entries()) if (typeof id !== 'string' || !PCI_ID.test(id)) throw invalidInput(`${name}.pci_ids[${i}]`, 'must be a PCI vendor:device id such as 10de:2330');
  const args = [iommu === 'intel' ? 'intel_iommu=on' : 'amd_iommu=on', 'iommu=pt'];
  if (ids.length) args.push(`vfio-pci.ids=${(ids as string[]).map((s) => s.toLowerCase()).join(',')}`);
  return args;
}

function checkHostname(request: PreseedRequest): { host: string; domain: string } {
  const name = field(request, 'hostname');
  const full = request.hostname;
  if (typeof full !== 'string' || full.length === 0 || full.length > 253) throw invalidInput(name, 'must be a hostname of 1 to 253 characters');
  const labels = full.split('.');
  for (const l of labels) if (!HOST_LABEL.test(l)) throw invalidInput(name, 'each label must be 1-63 letters, digits or hyphens, not starting or ending with a hyphen');
  const domain = request.domain ?? labels.slice(1).join('.');
  if (domain) for (const l of domain.split('.')) if (!HOST_LABEL.test(l)) throw invalidInput('domain', 'must be a DNS domain');
  return { host: labels[0]!.toLowerCase(), domain: domain.toLowerCase() };
}

function checkNetwork(request: PreseedRequest): PreseedRequest['network'] {
  const name = field(request, 'network');
  const network = request.network;
  if (network.mode === 'dhcp') return network;
  if (!ipaddr.IPv4.isValidFourPartDecimal(network.address)) throw invalidInput(`${name}.address`, 'must be an IPv4 address');
  if (!Number.isInteger(network.prefixLength) || network.prefixLength < 1 || network.prefixLength > 32) throw invalidInput(`${name}.prefixLength`, 'must be 1..32');
  if (!ipaddr.IPv4.isValidFourPartDecimal(network.gateway)) throw invalidInput(`${name}.gateway`, 'must be an IPv4 address');
  const net = ipaddr.IPv4.parse(network.address);
  if (!ipaddr.IPv4.parse(network.gateway).match(net, network.prefixLength)) throw invalidInput(`${name}.gateway`, 'must lie in the subnet of address/prefix_length');
  if (!Array.isArray(network.nameservers) || network.nameservers.length > 3) throw invalidInput(`${name}.nameservers`, 'must list at most 3 addresses');
  for (const [i, ns] of network.nameservers.entries()) if (!ipaddr.isValid(ns)) throw invalidInput(`${name}.nameservers[${i}]`, 'must be an IP address');
  return network;
}

const macOf = (mac: string) => mac.toLowerCase().replace(/-/g, ':');

/** One shell word in single quotes (the callback's URL and body; all are checked before). */
const sq = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

export function renderPreseed(request: PreseedRequest): Preseed {
  const { host, domain } = checkHostname(request);
  const userField = field(request, 'osUsername');
  if (typeof request.osUsername !== 'string' || !USERNAME.test(request.osUsername)) throw invalidInput(userField, 'must be a Linux user name: a lower-case letter or _, then up to 31 of a-z, 0-9, _ and -');
  if (RESERVED_USERS.has(request.osUsername)) throw invalidInput(userField, 'is a system account; root\'s login is disabled and the user gets sudo');
  const pwField = field(request, 'osPassword');
  if (typeof request.osPassword !== 'string' || request.osPassword.length < 8 || request.osPassword.length > 256) throw invalidInput(pwField, 'must be 8 to 256 characters');
  const { disks, poolType } = checkDisks(request);
  if (request.nicMac != null && (typeof request.nicMac !== 'string' || !MAC.test(request.nicMac))) throw invalidInput(field(request, 'nicMac'), 'must be a MAC address (aa:bb:cc:dd:ee:ff)');
  if (request.nicName != null && (typeof request.nicName !== 'string' || !NIC_NAME.test(request.nicName))) throw invalidInput(field(request, 'nicName'), 'must be an interface name such as enp65s0f0');
  const network = checkNetwork(request);
  const gpuArgs = gpuKernelArgs(request.gpuPassthrough, field(request, 'gpuPassthrough'));
  const { baseUrl, jobId, token } = request.callback;
  const base = new URL(baseUrl);
  if (!['http:', 'https:'].includes(base.protocol) || base.username || base.password || /[\s'"\\]/.test(baseUrl)) throw new Error('the callback base URL must be a plain http(s) URL');
  if (!TOKEN.test(token) || !JOB_ID.test(jobId)) throw new Error('the callback token and job id must be URL-safe words');
  if (!ipaddr.isValid(request.bmcIp)) throw new Error('bmcIp must be an IP address');

  const passwordHash = sha512Crypt(request.osPassword);
  const api = `${base.origin}${base.pathname.replace(/\/+$/, '')}/controlnode`;
  const report = (step: string, percent: number) => `/metal/report ${step} ${percent}`;
  const mirrorHost = request.mirror?.host ?? 'deb.debian.org';
  const mirrorDir = request.mirror?.directory ?? '/debian';
  if (!/^[A-Za-z0-9.-]+(:\d+)?$/.test(mirrorHost) || !/^\/[A-Za-z0-9._/-]*$/.test(mirrorDir)) throw new Error('the mirror must be a host and a path');

  const lines: string[] = [
    '# Written by the metal control plane for one control-node job: do not edit, it is rebuilt per job.',
    'd-i debian-installer/locale string en_US.UTF-8',
    'd-i keyboard-configuration/xkb-keymap select us',
    'd-i time/zone string Etc/UTC',
    'd-i clock-setup/utc boolean true',
    'd-i clock-setup/ntp boolean true',
    // Network: the interface BOOTIF names (by MAC) or the one named; DHCP or static.
    `d-i netcfg/choose_interface select ${request.nicName && !request.nicMac ? request.nicName : 'auto'}`,
    `d-i netcfg/get_hostname string ${host}`,
    `d-i netcfg/get_domain string ${domain}`,
    `d-i netcfg/hostname string ${host}`,
    ...(network.mode === 'static'
      ? [
          'd-i netcfg/disable_autoconfig boolean true',
          `d-i netcfg/get_ipaddress string ${network.address}`,
          `d-i netcfg/get_netmask string ${ipaddr.IPv4.subnetMaskFromPrefixLength(network.prefixLength).toString()}`,
          `d-i netcfg/get_gateway string ${network.gateway}`,
          `d-i netcfg/get_nameservers string ${network.nameservers.join(' ')}`,
          'd-i netcfg/confirm_static boolean true',
        ]
      : ['d-i netcfg/disable_autoconfig boolean false']),
    'd-i hw-detect/load_firmware boolean true',
    'd-i mirror/country string manual',
    `d-i mirror/http/hostname string ${mirrorHost}`,
    `d-i mirror/http/directory string ${mirrorDir}`,
    'd-i mirror/http/proxy string',
    // Accounts: no root login; the user, with a crypted password only, in sudo.
    'd-i passwd/root-login boolean false',
    'd-i passwd/make-user boolean true',
    `d-i passwd/user-fullname string ${request.osUsername}`,
    `d-i passwd/username string ${request.osUsername}`,
    `d-i passwd/user-password-crypted password ${passwordHash}`,
    'd-i passwd/user-default-groups string sudo',
    ...partitioning(disks, poolType),
    'd-i base-installer/install-recommends boolean false',
    'tasksel tasksel/first multiselect standard, ssh-server',
    'd-i pkgsel/include string openssh-server curl sudo mdadm',
    'd-i pkgsel/upgrade select none',
    'popularity-contest popularity-contest/participate boolean false',
    'd-i grub-installer/only_debian boolean true',
    `d-i grub-installer/bootdev string ${disks.map(devicePath).join(' ')}`,
    ...(gpuArgs.length ? [`d-i debian-installer/add-kernel-opts string ${gpuArgs.join(' ')}`] : []),
    `d-i preseed/early_command string ${report('installer-started', 10)}`,
    `d-i partman/early_command string ${report('partitioning', 25)}`,
    `d-i preseed/late_command string ${LATE_COMMAND}`,
    'd-i finish-install/reboot_in_progress note',
    'd-i cdrom-detect/eject boolean true',
  ];
  const bootArgs = ['auto=true', 'priority=critical', 'DEBIAN_FRONTEND=text', `hostname=${host}`, ...(domain ? [`domain=${domain}`] : []),
    ...(request.nicMac ? [`BOOTIF=01-${macOf(request.nicMac).replace(/:/g, '-')}`] : []), '---', 'quiet'];
  return { files: [{ path: 'preseed.cfg', mode: 0o644, content: lines.join('\n') + '\n' }, ...callbackFiles(api, jobId, token, request.bmcIp)], bootArgs, passwordHash };
}

/** partman: md RAID over every chosen disk for the pool type, or one plain disk for single. */
function partitioning(disks: string[], poolType: PoolType): string[] {
  const common = [
    'd-i partman-partitioning/choose_label select gpt',
    'd-i partman-partitioning/default_label string gpt',
    'd-i partman/confirm_write_new_label boolean true',
    'd-i partman/choose_partition select finish',
    'd-i partman/confirm boolean true',
    'd-i partman/confirm_nooverwrite boolean true',
    'd-i partman-md/device_remove_md boolean true',
    'd-i partman-lvm/device_remove_lvm boolean true',
    'd-i partman-md/confirm boolean true',
    'd-i partman-md/confirm_nooverwrite boolean true',
  ];
  const level = MD_LEVEL[poolType];
  if (level === null) {
    return [
      `d-i partman-auto/disk string ${devicePath(disks[0]!)}`,
      'd-i partman-auto/method string regular',
      'd-i partman-auto/choose_recipe select atomic',
      ...common,
    ];
  }
  // Each disk: a BIOS boot partition, a 1 GB member of /boot's RAID1, and the rest for / at the pool's level.
  const recipe = [
    'boot-root ::',
    '1 1 1 free $bios_boot{ } method{ biosgrub } .',
    '1024 1024 1024 raid $primary{ } method{ raid } .',
    '4096 8192 -1 raid $primary{ } method{ raid } .',
  ].join(' ');
  const boot = disks.map((d) => partitionPath(d, 2)).join('#');
  const root = disks.map((d) => partitionPath(d, 3)).join('#');
  return [
    `d-i partman-auto/disk string ${disks.map(devicePath).join(' ')}`,
    'd-i partman-auto/method string raid',
    `d-i partman-auto/expert_recipe string ${recipe}`,
    `d-i partman-auto-raid/recipe string 1 ${disks.length} 0 ext4 /boot ${boot} . ${level} ${disks.length} 0 ext4 / ${root} .`,
    ...common,
  ];
}

/**
 * The late command: the last step report, the first-boot unit and its script into the target with
 * the job's token (a root-only file the unit reads, removed once it reported), then the job's
 * completion with the OS address.
 */
const LATE_COMMAND = [
  '/metal/report installing-finish 90',
  'mkdir -p /target/etc/metal /target/usr/local/sbin',
  'cp /metal/callback-token /target/etc/metal/callback-token',
  'chmod 600 /target/etc/metal/callback-token',
  'cp /metal/job.env /target/etc/metal/job.env',
  'cp /metal/firstboot /target/usr/local/sbin/metal-firstboot',
  'chmod 755 /target/usr/local/sbin/metal-firstboot',
  'cp /metal/metal-firstboot.service /target/etc/systemd/system/metal-firstboot.service',
  'in-target systemctl enable metal-firstboot.service',
  '/metal/complete',
].join('; ');

/** The job's callback scripts (POSIX sh: BusyBox in the installer, dash in the target). */
function callbackFiles(api: string, jobId: string, token: string, bmcIp: string): InitrdFile[] {
  const env = [`METAL_API=${sq(api)}`, `METAL_JOB=${sq(jobId)}`, `METAL_BMC_IP=${sq(bmcIp)}`].join('\n') + '\n';
  const osIp = `ip -4 -o route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \\([0-9.]*\\).*/\\1/p'`;
  const post = (url: string, body: string) =>
    `wget -q -O /dev/null --header="Authorization: Bearer $(cat /metal/callback-token)" --header='Content-Type: application/json' --post-data="${body}" "${url}" || true`;
  return [
    { path: 'metal/callback-token', mode: 0o600, content: token },
    { path: 'metal/job.env', mode: 0o644, content: env },
    {
      path: 'metal/report', mode: 0o755,
      content: `#!/bin/sh\n# Reports an installer step to the metal control plane: report <step> <percent> [active|done|failed]\n. /metal/job.env\n${post('$METAL_API/job/$METAL_JOB/step', '{\\"step\\":\\"$1\\",\\"percent\\":$2,\\"state\\":\\"${3:-active}\\"}')}\n`,
    },
    {
      path: 'metal/complete', mode: 0o755,
      content: `#!/bin/sh\n# Reports the installed system's address: the job is complete.\n. /metal/job.env\nip=$(${osIp})\n${post('$METAL_API/job/$METAL_JOB/complete', '{\\"os_ip\\":\\"$ip\\"}')}\n`,
    },
    {
      path: 'metal/firstboot', mode: 0o755,
      content: `#!/bin/sh\n# The installed system's first boot: reports it once, then removes itself and the token.\nset -e\n. /etc/metal/job.env\nip=$(${osIp})\ncurl -fsS -X POST -H "Authorization: Bearer $(cat /etc/metal/callback-token)" -H 'Content-Type: application/json' -d "{\\"job_id\\":\\"$METAL_JOB\\",\\"bmc_ip\\":\\"$METAL_BMC_IP\\",\\"os_ip\\":\\"$ip\\"}" "$METAL_API/firstboot"\nsystemctl disable metal-firstboot.service\nrm -f /etc/metal/callback-token\n`,
    },
    {
      path: 'metal/metal-firstboot.service', mode: 0o644,
      content: '[Unit]\nDescription=Report the first boot to the metal control plane\nAfter=network-online.target\nWants=network-online.target\n\n[Service]\nType=oneshot\nExecStart=/usr/local/sbin/metal-firstboot\n\n[Install]\nWantedBy=multi-user.target\n',
    },
  ];
}
