/**
 * Issue 20, "Real captures": the Redfish driver against crawls of real vendor BMCs
 * (../shared/redfish-captures, INTEROP_CAPTURES), each served unchanged by DMTF's Redfish Mockup
 * Server (../shared/peers, INTEROP_PEERS). One row per capture (per host system where a capture has
 * several): what the out-of-band inventory reads, the boot override the driver would send for a
 * one-time UEFI PXE boot, and the virtual media slots it finds.
 *
 * Every expected value below was read BY HAND from the capture's JSON files (paths cited per row,
 * relative to the capture's redfish/v1/); none is computed by the driver or by code that repeats its
 * rules. Where a capture is trimmed (SKIPPED.txt) or lacks a linked resource, the row says what the
 * driver must report as unreadable instead.
 *
 * Conventions the rows rely on (docs/bmc-redfish.md, the driver API of issue 20):
 *  - macs: the system's EthernetInterfaces only, lower-case colon form; never a host-interface NIC
 *    (ToManager/ToHost, Links.HostInterface, 169.254.x), never a manager's NIC.
 *  - uuid: lower-case; null for a placeholder or the BMC's MAC padded with zeros.
 *  - storage: Storage Drives and SimpleStorage Devices, one entry per physical drive; devices with no
 *    capacity, Absent or UnavailableOffline are not drives. null when neither collection is linked.
 *  - unreadable: each linked part of the inventory that answered an error (here: 404, the file is not
 *    in the capture), named by the system's property that links it.
 *  - boot plan: bootOverridePlan(bmc, 'pxe', { persistent: false, uefi: true }).
 *  - media: mediaSlots(bmc): the CD/DVD-capable slots of the system's VirtualMedia, else its managers'.
 */
import path from 'node:path';
import type { BmcEndpoint, OutOfBandInventory } from '../../clients/bmc/driver';
import type { MediaSlot } from '../../clients/bmc/redfish/virtual-media';
import type { RedfishInventory } from '../../clients/bmc/redfish/inventory';
import { REDFISH_FLAVOURS, RedfishDriver, RedfishTransport } from '../../clients/bmc/redfish';
import { buildTree } from './helpers/capture-tree';
import { startMockupServer, type MockupServer } from './helpers/mockup';
import { interopPaths } from './helpers/peers';

jest.setTimeout(60_000);

type Disk = NonNullable<OutOfBandInventory['storage']>[number];

// ---- rows ----

interface Row {
  name: string;
  /** The short-form mockup directory to serve (index.json at its top), and what to remove afterwards. */
  mockup(): { dir: string; remove?: () => void };
  flavour: 'redfish' | 'idrac' | 'ilo' | 'xcc' | 'cimc' | 'supermicro';
  systemId?: string;
  inventory?: {
    macs: string[];
    uuid: string | null;
    /** Omitted: not checked (the capture lacks the collection, so the row checks `unreadable` instead). */
    storage?: Disk[] | null;
    /** The system properties whose linked resource is not in the capture (each must be named, reason 404). */
    unreadable: string[];
  };
  boot?: { path: string; via: 'system' | 'settings'; enabled: 'Once' | 'Continuous'; body: Record<string, unknown> };
  media?: MediaSlot[];
}

const CAPTURES = interopPaths().captures;
const LIBREDFISH = path.join(CAPTURES, 'nvidia-libredfish/tests/mockups');
const tree = (capture: string) => () => ({ dir: path.join(LIBREDFISH, capture, 'redfish/v1') });
const pxeOnce = (mode?: 'UEFI') => ({ Boot: { BootSourceOverrideTarget: 'Pxe', BootSourceOverrideEnabled: 'Once', ...(mode ? { BootSourceOverrideMode: mode } : {}) } });
const actionSlot = (base: string, id: string, eject = true): MediaSlot => ({
  id,
  path: `${base}/${id}`,
  empty: true,
  mount: 'action',
  insertTarget: `${base}/${id}/Actions/VirtualMedia.InsertMedia`,
  ejectTarget: eject ? `${base}/${id}/Actions/VirtualMedia.EjectMedia` : null,
});
/** A minimal service root and Systems collection around single saved responses (the scaffolding is ours, the system resources are the capture's bytes). */
const scaffold = (systemPaths: string[]) => [
  { path: '/redfish/v1', body: { '@odata.id': '/redfish/v1', '@odata.type': '#ServiceRoot.v1_5_0.ServiceRoot', Id: 'RootService', Systems: { '@odata.id': '/redfish/v1/Systems' } } },
  { path: '/redfish/v1/Systems', body: { '@odata.id': '/redfish/v1/Systems', '@odata.type': '#ComputerSystemCollection.ComputerSystemCollection', Members: systemPaths.map((p) => ({ '@odata.id': p })), 'Members@odata.count': systemPaths.length } },
];

const ROWS: Row[] = [
  {
    // nvidia-libredfish/tests/mockups/dell_multi_dpu: Dell PowerEdge R750, iDRAC 9 fw 7.10.30.00.
    name: 'Dell R750 iDRAC 9 7.10 (libredfish dell_multi_dpu)',
    mockup: tree('dell_multi_dpu'),
    flavour: 'idrac',
    inventory: {
      // Systems/System.Embedded.1/EthernetInterfaces/index.json lists 4 members; MACAddress of
      // NIC.Embedded.2-1-1, NIC.Embedded.1-1-1, NIC.Slot.5-1, NIC.Slot.2-1 (each …/<id>/index.json).
      // The iDRAC's own NIC.1 is under Managers/iDRAC.Embedded.1/EthernetInterfaces: not the machine's.
      macs: ['c8:4b:d6:7b:ab:93', 'c8:4b:d6:7b:ab:92', 'a0:88:c2:08:54:5c', 'a0:88:c2:0c:b8:04'],
      // Systems/System.Embedded.1/index.json UUID "4c4c4544-004c-4c10-8056-c3c04f305233".
      uuid: '4c4c4544-004c-4c10-8056-c3c04f305233',
      // Storage/CPU.1/index.json links Drives Disk.Bay.6:Enclosure.Internal.0-1 and Disk.Bay.7:…
      // (…/Drives/<id>/index.json: Name, CapacityBytes, SerialNumber); Storage/AHCI.Embedded.{1,2}-1
      // have Drives []. SimpleStorage/CPU.1/index.json lists the SAME two SSDs again (same Name and
      // CapacityBytes, no serial) plus "PCIe SSD Backplane 1" with CapacityBytes null: the machine has
      // two drives, not four, and the backplane is no drive.
      storage: [
        { name: 'PCIe SSD in Slot 6 in Bay 1', sizeBytes: 1920383410176, serial: 'S6CSNE0RB00699' },
        { name: 'PCIe SSD in Slot 7 in Bay 1', sizeBytes: 1920383410176, serial: 'S6CSNE0RB00701' },
      ],
      // Every linked EthernetInterfaces/Processors/Memory/Storage/SimpleStorage member is in the tree.
      unreadable: [],
    },
    boot: {
      // Systems/System.Embedded.1/index.json Boot: BootSourceOverrideTarget@Redfish.AllowableValues has
      // "Pxe" (on the system itself: PATCH in place, although @Redfish.Settings names …/Settings, whose
      // Boot holds only BootOrder [] and BootSourceOverrideMode null: Settings/index.json); no
      // BootSourceOverrideEnabled@Redfish.AllowableValues (no list = Once offered);
      // BootSourceOverrideMode "UEFI".
      path: '/redfish/v1/Systems/System.Embedded.1',
      via: 'system',
      enabled: 'Once',
      body: pxeOnce('UEFI'),
    },
    // The system links VirtualMedia (Systems/System.Embedded.1/index.json), so the manager's
    // CD/RemovableDisk are not used. VirtualMedia/index.json: members 1 and 2; each …/{1,2}/index.json:
    // MediaTypes CD/DVD/USBStick, Image null, Inserted false, InsertMedia and EjectMedia targets.
    media: [
      actionSlot('/redfish/v1/Systems/System.Embedded.1/VirtualMedia', '1'),
      actionSlot('/redfish/v1/Systems/System.Embedded.1/VirtualMedia', '2'),
    ],
  },
  {
    // nvidia-libredfish/tests/mockups/hpe: HPE ProLiant DL385 Gen10 Plus v2, iLO 5 2.72.
    name: 'HPE DL385 Gen10 Plus v2 iLO 5 2.72 (libredfish hpe)',
    mockup: tree('hpe'),
    flavour: 'ilo',
    inventory: {
      // Systems/1/EthernetInterfaces/{1..7}/index.json MACAddress (PermanentMACAddress null).
      // The host interface 0A:CA:FE:F0:0D:04 is Managers/1/EthernetInterfaces/3: not listed here.
      macs: ['50:7c:6f:11:f2:a6', '50:7c:6f:11:f2:a7', '50:7c:6f:11:f2:a8', '50:7c:6f:11:f2:a9', '88:e9:a4:87:42:c8', '88:e9:a4:80:9d:a2', 'b8:3f:d2:d7:f7:4a'],
      // Systems/1/index.json UUID "34383350-3131-584D-5133-303230393953" (upper case there).
      uuid: '34383350-3131-584d-5133-303230393953',
      // Systems/1/Storage/index.json: 17 members. DA0000xx/index.json each link one drive
      // …/Drives/DA0000xx/ (trailing "/"), DE081000/index.json links Drives/0 and Drives/1.
      // Each drive's index.json: Name, CapacityBytes, SerialNumber, Status.State Enabled
      // (DA00001C reads Health Critical: still a drive). No SimpleStorage link.
      storage: [
        ['DA000000', 'S6C1NA0TA01511'], ['DA000001', 'S6C1NA0TA00991'], ['DA000004', 'S6C1NA0TA01436'], ['DA000005', 'S6C1NA0TA01510'],
        ['DA000008', 'S6C1NA0TA00962'], ['DA000009', 'S6C1NA0TA01474'], ['DA00000C', 'S6C1NA0TA00957'], ['DA00000D', 'S6C1NA0TA01508'],
        ['DA000010', 'S6C1NA0TA04201'], ['DA000011', 'S6C1NA0TA04203'], ['DA000014', 'S6C1NA0TA04221'], ['DA000015', 'S6C1NA0TA04214'],
        ['DA000018', 'S6C1NA0TA01473'], ['DA000019', 'S6C1NA0TA01470'], ['DA00001C', 'S6C1NA0TA04209'], ['DA00001D', 'S6C1NA0TA04222'],
      ].map(([, serial]) => ({ name: 'Secondary Storage Device', sizeBytes: 6401252745216, serial: serial! }))
        .concat([
          // Storage/DE081000/Drives/0 and /1.
          { name: '480GB 6G SATA SSD', sizeBytes: 480103981056, serial: 'S6MPNE0T802701' },
          { name: '480GB 6G SATA SSD', sizeBytes: 480103981056, serial: 'S6MPNE0T802706' },
        ]),
      unreadable: [],
    },
    boot: {
      // Systems/1/index.json Boot: Target AllowableValues has "Pxe"; no Enabled AllowableValues;
      // BootSourceOverrideMode "UEFI"; no @Redfish.Settings on the system.
      path: '/redfish/v1/Systems/1',
      via: 'system',
      enabled: 'Once',
      body: pxeOnce('UEFI'),
    },
    // Systems/1 links no VirtualMedia; Links.ManagedBy Managers/1, whose VirtualMedia/index.json lists
    // 1 (MediaTypes Floppy/USBStick: not a CD slot) and 2 (CD/DVD, Image "", Inserted false, both actions).
    media: [actionSlot('/redfish/v1/Managers/1/VirtualMedia', '2')],
  },
  {
    // nvidia-libredfish/tests/mockups/lenovo: Lenovo ThinkSystem SR670 V2, XCC 2.83.
    name: 'Lenovo SR670 V2 XCC 2.83 (libredfish lenovo)',
    mockup: tree('lenovo'),
    flavour: 'xcc',
    inventory: {
      // Systems/1/EthernetInterfaces/NIC{1..4}/index.json MACAddress. Not ToManager (…/ToManager/index.json:
      // "Host Ethernet Interface", Links.HostInterface Managers/1/HostInterfaces/1, MAC 0a:8f:c3:a5:8a:71).
      macs: ['00:62:0b:4c:28:4e', '00:62:0b:4c:28:4f', '00:62:0b:4c:28:50', '00:62:0b:4c:28:51'],
      // Systems/1/index.json UUID "6173ecec-6ef5-11ee-834a-0a8fc3a58a71": a time-based (version 1) UUID
      // whose node field is the ToManager MAC; a real UUID, not a zero-padded MAC.
      uuid: '6173ecec-6ef5-11ee-834a-0a8fc3a58a71',
      // Storage/M.2/index.json: Drives/Drive.M.2_Bay_{0,1}; Storage/Direct_Attached_NVMe/index.json:
      // Drives/Drive.Bay_{0,1} (each …/index.json: Name, CapacityBytes, SerialNumber). No SimpleStorage.
      storage: [
        { name: '960GB M.2 NVMe SSD', sizeBytes: 960000000000, serial: '233442ABA3AB' },
        { name: '960GB M.2 NVMe SSD', sizeBytes: 960000000000, serial: '233442ABA28A' },
        { name: '7.68TB EDSFF NVMe SSD', sizeBytes: 7680000000000, serial: '233242BE0C46' },
        { name: '7.68TB EDSFF NVMe SSD', sizeBytes: 7680000000000, serial: '233242BE0C5A' },
      ],
      unreadable: [],
    },
    boot: {
      // Systems/1/index.json Boot: Target AllowableValues has "Pxe"; BootSourceOverrideEnabled@
      // Redfish.AllowableValues ["Once","Disabled"]; Mode "UEFI". @Redfish.Settings → Systems/1/Pending,
      // whose Boot holds only BootOrder (Pending/index.json): the override goes to the system.
      path: '/redfish/v1/Systems/1',
      via: 'system',
      enabled: 'Once',
      body: pxeOnce('UEFI'),
    },
    // Systems/1/VirtualMedia/index.json: EXT1-4, Remote1-4, RDOC1-2; each …/index.json MediaTypes
    // CD/DVD/Floppy/USBStick, Image null, Inserted false, NO Actions. The xcc flavour mounts its EXT
    // slots by PATCH (docs/bmc-redfish.md); Remote and RDOC slots have no way to mount: they are the
    // remote console's and the uploaded-image (RDOC) slots, and Lenovo's own Redfish client skips them
    // when it mounts by PATCH (Ansible community.general xcc_redfish_command.py,
    // _find_empty_virt_media_slot: `if 'RDOC' in uri: continue; if 'Remote' in uri: continue`).
    media: [
      ...['EXT1', 'EXT2', 'EXT3', 'EXT4'].map((id) => ({ id, path: `/redfish/v1/Systems/1/VirtualMedia/${id}`, empty: true, mount: 'patch' as const, insertTarget: null, ejectTarget: null })),
      ...['Remote1', 'Remote2', 'Remote3', 'Remote4', 'RDOC1', 'RDOC2'].map((id) => ({ id, path: `/redfish/v1/Systems/1/VirtualMedia/${id}`, empty: true, mount: 'none' as const, insertTarget: null, ejectTarget: null })),
    ],
  },
  {
    // nvidia-libredfish/tests/mockups/supermicro: Supermicro SYS-821GE-TNHR (X13), BMC 11.01.01.
    name: 'Supermicro X13 SYS-821GE-TNHR (libredfish supermicro)',
    mockup: tree('supermicro'),
    flavour: 'supermicro',
    inventory: {
      // Systems/1/EthernetInterfaces/{1..11}/index.json MACAddress. Not ToManager (…/ToManager/index.json:
      // BE:3A:F2:B6:05:9F, IPv4 169.254.3.1, Links.HostInterface).
      macs: [
        '94:6d:ae:91:fb:22', '94:6d:ae:91:09:c2', '94:6d:ae:91:6a:9a', '94:6d:ae:91:67:6a', '94:6d:ae:91:dd:1a',
        '94:6d:ae:91:75:9a', '94:6d:ae:91:75:ba', '94:6d:ae:91:73:8a', '7c:c2:55:79:3f:8e', '7c:c2:55:79:3f:8f', '94:6d:ae:b2:b1:4e',
      ],
      // Systems/1/index.json UUID "00000000-0000-0000-0000-7CC25550A8FF": the BMC's own MAC
      // (Managers/1/EthernetInterfaces/1/index.json MACAddress 7C:C2:55:50:A8:FF) padded with zeros.
      uuid: null,
      // Storage/NVMeSSD/index.json links 8 drives under /redfish/v1/Chassis/NVMeSSD.0.Group.0.StorageBackplane/
      // Drives/Disk.Bay.{0..7} (no Drives@odata.count); each Chassis/…/Disk.Bay.N/index.json Name
      // "Disk.Bay.N", CapacityBytes, SerialNumber. SimpleStorage/1/index.json lists the same 8 NVMe as
      // Devices WITHOUT CapacityBytes: not counted again.
      storage: [
        'S6CKNN0W502286', 'S6CKNN0W502114', 'S6CKNN0W502287', 'S6CKNN0W502288',
        'S6CKNN0W502111', 'S6CKNN0W502373', 'S6CKNN0W501980', 'S6CKNN0W502279',
      ].map((serial, i) => ({ name: `Disk.Bay.${i}`, sizeBytes: 7681501126656, serial })),
      unreadable: [],
    },
    boot: {
      // Systems/1/index.json Boot: Target AllowableValues has "Pxe"; no Enabled AllowableValues;
      // BootSourceOverrideMode "UEFI" (this X13 shows a Mode, unlike the older boards the supermicro
      // flavour was written for; NVIDIA's libredfish src/supermicro.rs set_boot_override sends
      // BootSourceOverrideMode UEFI to these machines); no @Redfish.Settings. At rest: Disabled, "Pxe".
      path: '/redfish/v1/Systems/1',
      via: 'system',
      enabled: 'Once',
      body: pxeOnce('UEFI'),
    },
    // Systems/1/index.json VirtualMedia → Managers/1/VirtualMedia (index.json: VirtualMedia1-3); each
    // …/index.json: CD/DVD/Floppy/USBStick, Image null, Inserted false, only #VirtualMedia.InsertMedia.
    media: ['VirtualMedia1', 'VirtualMedia2', 'VirtualMedia3'].map((id) => actionSlot('/redfish/v1/Managers/1/VirtualMedia', id, false)),
  },
  {
    // nvidia-libredfish/tests/mockups/nvidia_viking: NVIDIA DGX H100, AMI MegaRAC 23.11.20. Two systems
    // (Systems/index.json: DGX, HGX_Baseboard_0): the host is DGX.
    name: 'NVIDIA DGX H100 AMI (libredfish nvidia_viking), system DGX',
    mockup: tree('nvidia_viking'),
    flavour: 'redfish',
    systemId: 'DGX',
    inventory: {
      // Systems/DGX/EthernetInterfaces/EthernetInterface{0..4}/index.json MACAddress (0-3 read
      // State Disabled, InterfaceEnabled false: still the machine's NICs). usb0 is under Managers.
      macs: ['5c:ff:35:fe:04:b1', '6c:fe:54:41:15:78', '6c:fe:54:41:15:79', '94:6d:ae:aa:2a:19', 'a0:88:c2:82:6e:52'],
      // Systems/DGX/index.json UUID "B11DD4F2-BFDE-1000-02BC-5CFF35FBE6E9".
      uuid: 'b11dd4f2-bfde-1000-02bc-5cff35fbe6e9',
      // Systems/DGX/Storage/index.json has no Members at all. SimpleStorage/index.json: 0-9, A; the
      // NVMe devices (Devices[].Name, CapacityBytes; no serial) are in 0, 1, 3-9, A. SimpleStorage/2 holds
      // only the BMC's own USB virtual media ("American Megatreds Inc." "Virtual Cdrom Device" 2048 B,
      // "Virtual HDisk Device"): no machine drive. 10 drives (issue 20: "DGX: 0 disks instead of 10").
      storage: [
        { name: 'NVMe_Device0_NSID1', sizeBytes: 1920383410176, serial: null },
        { name: 'NVMe_Device1_NSID1', sizeBytes: 1920383410176, serial: null },
        ...['7', '8', '9', 'A', 'B', 'C', 'D', 'E'].map((d) => ({ name: `NVMe_Device${d}_NSID1`, sizeBytes: 3840755982336, serial: null })),
      ],
      unreadable: [],
    },
    boot: {
      // Systems/DGX/index.json Boot: NO AllowableValues, BootSourceOverrideMode null; @Redfish.Settings
      // SettingsObject /redfish/v1/Systems/DGX/SD (no SupportedApplyTimes). SD/index.json Boot: Target
      // AllowableValues has "Pxe", Enabled AllowableValues ["Disabled","Once","Continuous"],
      // BootSourceOverrideMode@Redfish.AllowableValues ["UEFI"].
      path: '/redfish/v1/Systems/DGX/SD',
      via: 'settings',
      enabled: 'Once',
      body: pxeOnce('UEFI'),
    },
    // Systems/DGX links no VirtualMedia; Links.ManagedBy Managers/BMC, whose VirtualMedia/index.json has
    // Members [].
    media: [],
  },
  {
    // nvidia-libredfish/tests/mockups/nvidia_dpu: NVIDIA BlueField-3, OpenBMC BF-24.10-10.
    name: 'NVIDIA BlueField-3 OpenBMC BF-24.10 (libredfish nvidia_dpu)',
    mockup: tree('nvidia_dpu'),
    flavour: 'redfish',
    inventory: {
      // Systems/Bluefield/EthernetInterfaces/{eth0,eth1,oob0}/index.json MACAddress (the DPU's own
      // ports). tmfifo_net0 (00:1a:ca:ff:ff:02) and the BMC's eth0 are under Managers/Bluefield_BMC.
      macs: ['5c:25:73:08:f3:62', '5c:25:73:08:f3:63', '5c:25:73:08:f3:76'],
      // Systems/Bluefield/index.json UUID null.
      uuid: null,
      // Systems/Bluefield/Storage/index.json Members null, count 0; no SimpleStorage link.
      storage: [],
      unreadable: [],
    },
    boot: {
      // Systems/Bluefield/index.json: @Redfish.Settings SettingsObject /redfish/v1/Systems/Bluefield/Settings
      // (no SupportedApplyTimes); Boot Target AllowableValues ["None","Pxe","UefiHttp",…] (no Cd/Hdd),
      // Enabled AllowableValues ["Once","Continuous","Disabled"], Mode AllowableValues ["Legacy","UEFI"].
      // Settings/index.json Boot: Target AllowableValues has "Pxe", BootSourceOverrideMode "UEFI".
      // The override goes to Settings (issue 20; NVIDIA's own libredfish src/nvidia_dpu.rs
      // set_boot_override PATCHes Systems/<id>/Settings with Mode UEFI, Enabled, Target).
      path: '/redfish/v1/Systems/Bluefield/Settings',
      via: 'settings',
      enabled: 'Once',
      body: pxeOnce('UEFI'),
    },
    // Systems/Bluefield links no VirtualMedia; Managers/Bluefield_BMC/index.json VirtualMedia null.
    media: [],
  },
  {
    // lambdalabs-redfish-exporter/internal/collector/testdata/gpu_info_unknown_multi: Supermicro
    // SYS-A21GE-NBRT (HGX B200), a REAL subset with anonymised serial/UUID. Systems/index.json: 1 and
    // HGX_Baseboard_0; the host is 1.
    name: 'Supermicro HGX B200 subset (lambdalabs gpu_info_unknown_multi), system 1',
    mockup: () => ({ dir: path.join(CAPTURES, 'lambdalabs-redfish-exporter/internal/collector/testdata/gpu_info_unknown_multi/redfish/v1') }),
    flavour: 'supermicro',
    systemId: '1',
    inventory: {
      // Systems/1/index.json links EthernetInterfaces, but Systems/1/EthernetInterfaces is not in the
      // subset: no MAC can be read.
      macs: [],
      // Systems/1/index.json UUID "00000000-0000-0000-0000-foo": a placeholder, not a UUID.
      uuid: null,
      // Storage is linked (Systems/1/index.json) but Systems/1/Storage is not in the subset: storage not
      // checked. MemorySummary.TotalSystemMemoryGiB 3072, so Memory is not needed.
      unreadable: ['EthernetInterfaces', 'Storage'],
    },
    boot: {
      // Systems/1/index.json Boot: Target AllowableValues has "Pxe"; no Enabled AllowableValues;
      // BootSourceOverrideMode "Legacy" with no Mode AllowableValues (Mode is shown, so UEFI is sent:
      // issue 20, Legacy machines must not PXE-boot in Legacy); no @Redfish.Settings.
      path: '/redfish/v1/Systems/1',
      via: 'system',
      enabled: 'Once',
      body: pxeOnce('UEFI'),
    },
    // Media not checked: Systems/1 VirtualMedia → Managers/1/VirtualMedia is not in the subset.
  },
  {
    // lambdalabs-redfish-exporter/internal/collector/testdata/gb300_happypath: NVIDIA GB300 NVL compute
    // tray, a REAL subset (anonymised). Systems/index.json: System_0 and HGX_Baseboard_0; host System_0.
    name: 'NVIDIA GB300 tray subset (lambdalabs gb300_happypath), system System_0',
    mockup: () => ({ dir: path.join(CAPTURES, 'lambdalabs-redfish-exporter/internal/collector/testdata/gb300_happypath/redfish/v1') }),
    flavour: 'redfish',
    systemId: 'System_0',
    inventory: {
      // Systems/System_0/index.json has no EthernetInterfaces property.
      macs: [],
      // Systems/System_0/index.json UUID "system0-uuid": a placeholder, not a UUID.
      uuid: null,
      // Systems/System_0/index.json links Memory and Storage, neither collection is in the subset (no
      // MemorySummary either); Processors/index.json lists …/HGX_Baseboard_0/Processors/CPU_1, which
      // is not in the subset (CPU_0, GPU_0-3 are).
      unreadable: ['Memory', 'Storage', 'Processors'],
    },
    // Boot not checked: the override's object is the @Redfish.Settings object
    // Systems/System_0/Settings, which the subset does not hold. Media not checked: Managers/BMC_0 is
    // not in the subset.
  },
  {
    // sushy/sushy/tests/unit/json_samples/settings-nokia.json (a Nokia AMI system: only
    // @Redfish.Settings → /redfish/v1/Systems/Self/SD, no Boot object) and settings-body-nokia.json
    // (the SD object), served under a minimal service root and Systems collection.
    name: 'Nokia AMI: system without Boot, settings object /SD (sushy settings-nokia + settings-body-nokia)',
    mockup: () => {
      const d = path.join(CAPTURES, 'sushy/sushy/tests/unit/json_samples');
      return buildTree([
        ...scaffold(['/redfish/v1/Systems/Self']),
        { path: '/redfish/v1/Systems/Self', from: path.join(d, 'settings-nokia.json') },
        { path: '/redfish/v1/Systems/Self/SD', from: path.join(d, 'settings-body-nokia.json') },
      ]);
    },
    flavour: 'redfish',
    boot: {
      // settings-nokia.json: no Boot; SettingsObject /redfish/v1/Systems/Self/SD (no SupportedApplyTimes).
      // settings-body-nokia.json Boot: Target AllowableValues has "Pxe", Enabled AllowableValues
      // ["Disabled","Once","Continuous"], Mode AllowableValues ["UEFI"].
      path: '/redfish/v1/Systems/Self/SD',
      via: 'settings',
      enabled: 'Once',
      body: pxeOnce('UEFI'),
    },
  },
  {
    // bmclib/internal/redfishwrapper/fixtures/smc_1.14.0_{serviceroot,systems,systems_1}.json: Supermicro
    // X12 SYS-510T-MR-EI018, Redfish 1.14.0, each file at its own @odata.id.
    name: 'Supermicro X12 at rest Continuous+Hdd (bmclib smc_1.14.0)',
    mockup: () => {
      const d = path.join(CAPTURES, 'bmclib/internal/redfishwrapper/fixtures');
      return buildTree([
        { path: '/redfish/v1', from: path.join(d, 'smc_1.14.0_serviceroot.json') },
        { path: '/redfish/v1/Systems', from: path.join(d, 'smc_1.14.0_systems.json') },
        { path: '/redfish/v1/Systems/1', from: path.join(d, 'smc_1.14.0_systems_1.json') },
      ]);
    },
    flavour: 'supermicro',
    boot: {
      // smc_1.14.0_systems_1.json Boot: BootSourceOverrideEnabled "Continuous", Target "Hdd" at rest;
      // Target AllowableValues has "Pxe"; no Enabled AllowableValues; Mode "UEFI"; no @Redfish.Settings.
      // What is set at rest does not decide the plan: Once is offered.
      path: '/redfish/v1/Systems/1',
      via: 'system',
      enabled: 'Once',
      body: pxeOnce('UEFI'),
    },
  },
  {
    // bmclib/internal/redfishwrapper/fixtures/dell/{serviceroot,systems,system.embedded.1}.json: Dell
    // PowerEdge R6515 (BIOS 2.2.4), each file at its own @odata.id.
    name: 'Dell R6515 iDRAC 9 in Legacy mode (bmclib dell)',
    mockup: () => {
      const d = path.join(CAPTURES, 'bmclib/internal/redfishwrapper/fixtures/dell');
      return buildTree([
        { path: '/redfish/v1', from: path.join(d, 'serviceroot.json') },
        { path: '/redfish/v1/Systems', from: path.join(d, 'systems.json') },
        { path: '/redfish/v1/Systems/System.Embedded.1', from: path.join(d, 'system.embedded.1.json') },
      ]);
    },
    flavour: 'idrac',
    boot: {
      // system.embedded.1.json Boot: BootSourceOverrideMode "Legacy" (no Mode AllowableValues); Target
      // AllowableValues has "Pxe"; no Enabled AllowableValues; no @Redfish.Settings.
      path: '/redfish/v1/Systems/System.Embedded.1',
      via: 'system',
      enabled: 'Once',
      body: pxeOnce('UEFI'),
    },
  },
];

// ---- the table ----

const FLAVOURS = new Map(REDFISH_FLAVOURS.map((f) => [f.name, f]));
const byKey = <T>(key: (x: T) => string) => (a: T, b: T) => key(a).localeCompare(key(b));
const diskKey = (d: Disk) => `${d.serial ?? ''}|${d.name}|${d.sizeBytes}`;

let transport: RedfishTransport;

beforeAll(() => {
  transport = new RedfishTransport({ connectTimeoutMs: 5000, headersTimeoutMs: 10_000, bodyTimeoutMs: 10_000, retries5xx: 0 });
});

afterAll(async () => {
  await transport?.close();
});

describe.each(ROWS)('$name', (row) => {
  let server: MockupServer;
  let cleanup: (() => void) | undefined;
  let bmc: BmcEndpoint;
  let driver: RedfishDriver;
  let inventory: Promise<RedfishInventory> | undefined;
  const inv = () => (inventory ??= driver.inventory(bmc).then((r) => r.value));

  beforeAll(async () => {
    const m = row.mockup();
    cleanup = m.remove;
    server = await startMockupServer(m.dir);
    bmc = { address: server.url, username: 'interop', password: 'interop-password', options: row.systemId ? { systemId: row.systemId } : {} };
    driver = new RedfishDriver(FLAVOURS.get(row.flavour)!, transport, { pollMs: 50, verifyDeadlineMs: 2000 });
  });

  afterAll(async () => {
    await server?.stop();
    cleanup?.();
  });

  const want = row.inventory;
  if (want) {
    it('inventory: the system\'s own MACs, normalised', async () => {
      expect([...(await inv()).macs].sort()).toEqual([...want.macs].sort());
    });

    it(`inventory: uuid ${want.uuid ?? 'null'}`, async () => {
      expect((await inv()).uuid).toBe(want.uuid);
    });

    if (want.storage !== undefined) {
      it(`inventory: ${want.storage === null ? 'no storage' : `${want.storage.length} drives`}`, async () => {
        const got = (await inv()).storage;
        if (want.storage === null) expect(got).toBeNull();
        else expect(got === null ? null : [...got].sort(byKey(diskKey))).toEqual([...want.storage!].sort(byKey(diskKey)));
      });
    }

    it(`inventory: unreadable ${want.unreadable.length ? want.unreadable.join(', ') : 'nothing'}`, async () => {
      const got = (await inv()).unreadable;
      expect(got).toEqual(expect.any(Array));
      // Each entry is named by the part it could not read; map it to the expected name it mentions.
      const named = [...new Set(got!.map((u) => want.unreadable.find((p) => u.part.includes(p)) ?? u.part))].sort();
      expect(named).toEqual([...want.unreadable].sort());
      expect(got!.filter((u) => !/404/.test(u.reason))).toEqual([]);
    });
  }

  const boot = row.boot;
  if (boot) {
    it(`boot override for a UEFI PXE boot once: ${boot.via} ${boot.path}`, async () => {
      const plan = await driver.bootOverridePlan(bmc, 'pxe', { persistent: false, uefi: true });
      expect({ path: plan.path, via: plan.via, enabled: plan.enabled, body: plan.body }).toEqual(boot);
    });
  }

  const media = row.media;
  if (media) {
    it(`virtual media: ${media.length} CD/DVD slots`, async () => {
      const slots = await driver.mediaSlots(bmc);
      const key = (s: MediaSlot) => s.path;
      expect([...slots].map((s) => ({ id: s.id, path: s.path, empty: s.empty, mount: s.mount, insertTarget: s.insertTarget, ejectTarget: s.ejectTarget })).sort(byKey(key)))
        .toEqual([...media].sort(byKey(key)));
    });
  }
});

describe('a capture with several systems', () => {
  it('DGX H100 (Systems/index.json: DGX, HGX_Baseboard_0) without systemId: refused, naming both, nothing guessed', async () => {
    const server = await startMockupServer(path.join(LIBREDFISH, 'nvidia_viking/redfish/v1'));
    try {
      const driver = new RedfishDriver(FLAVOURS.get('redfish')!, transport, { pollMs: 50, verifyDeadlineMs: 2000 });
      const err = await driver.inventory({ address: server.url, username: 'interop', password: 'interop-password', options: {} }).then(() => null, (e: unknown) => e);
      expect(err).toMatchObject({ code: 'BMC_UNSUPPORTED' });
      expect((err as Error).message).toMatch(/DGX/);
      expect((err as Error).message).toMatch(/HGX_Baseboard_0/);
      expect((err as Error).message).toMatch(/systemId/);
    } finally {
      await server.stop();
    }
  });
});

describe('a boot override sent to a captured BMC, served by the Mockup Server (PATCH merges into its memory)', () => {
  it('DGX H100 (AMI): sent to /Systems/DGX/SD, proven by the settings object holding it pending; the System itself never changes', async () => {
    const server = await startMockupServer(path.join(LIBREDFISH, 'nvidia_viking/redfish/v1'));
    try {
      const driver = new RedfishDriver(FLAVOURS.get('redfish')!, transport, { pollMs: 50, verifyDeadlineMs: 2000 });
      const bmc = { address: server.url, username: 'interop', password: 'interop-password', options: { systemId: 'DGX' } };
      const r = await driver.setBootDevice(bmc, 'pxe', { persistent: false });
      expect(r.notes.join(' ')).toMatch(/held in the BMC's pending settings \(\/redfish\/v1\/Systems\/DGX\/SD\)/);
      const get = async (p: string) => (await fetch(`${server.url}${p}`)).json() as Promise<{ Boot: Record<string, unknown> }>;
      expect((await get('/redfish/v1/Systems/DGX/SD')).Boot).toMatchObject({ BootSourceOverrideTarget: 'Pxe', BootSourceOverrideEnabled: 'Once', BootSourceOverrideMode: 'UEFI' });
      expect((await get('/redfish/v1/Systems/DGX')).Boot).toMatchObject({ BootSourceOverrideTarget: 'None', BootSourceOverrideEnabled: 'Disabled' });
    } finally {
      await server.stop();
    }
  });

  it('a restart of a captured machine with no usable LastResetTime (HPE iLO 5), which a static server never shows: unverified, never success', async () => {
    const server = await startMockupServer(path.join(LIBREDFISH, 'hpe/redfish/v1'));
    try {
      const driver = new RedfishDriver(FLAVOURS.get('ilo')!, transport, { pollMs: 50, verifyDeadlineMs: 2000 });
      const bmc = { address: server.url, username: 'interop', password: 'interop-password', options: {} };
      const state = await driver.powerState(bmc);
      if (state === 'on') {
        const r = await driver.power(bmc, 'reset');
        expect(r.unverified).toMatch(/no usable LastResetTime/);
      } else {
        // Off: a reset powers it on, and a static server never shows it on.
        expect(await driver.power(bmc, 'reset').then(() => 'succeeded', (e: { code?: string }) => e.code)).toBe('BMC_NOT_APPLIED');
      }
    } finally {
      await server.stop();
    }
  });
});
