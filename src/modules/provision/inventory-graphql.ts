import { builder } from '../../graphql/builder';
import { decide } from '../../auth/decide';
import { requirePrincipal } from '../../context';
import { AppError } from '../../errors';
import type { ControlNodeInventory, InventoryDisk, InventoryGpu, InventoryNic } from './inventory';

/** The seed's GET /controlnode/bmc/{bmc_ip}/disks and /gpus, in GraphQL: one query, both answers. */

const source = builder.enumType('InventorySource', {
  description: 'Where in NetBox an inventory entry is recorded',
  values: {
    INVENTORY_ITEM: { value: 'inventory-item', description: 'a device inventory item (dcim.inventoryitem)' },
    MODULE: { value: 'module', description: 'an installed module (dcim.module), typed by its module type\'s profile since NetBox 4.3' },
  } as const,
});

const DiskRef = builder.objectRef<InventoryDisk>('ControlNodeDisk').implement({
  description: 'A disk of the device, as NetBox records it: a name to pass in provision\'s selected_disks',
  fields: (t) => ({
    name: t.exposeString('name', { description: 'The inventory item\'s name (e.g. nvme0n1), or the module\'s bay' }),
    model: t.exposeString('model', { nullable: true, description: 'The part id, or the module type\'s model' }),
    serial: t.exposeString('serial', { nullable: true }),
    manufacturer: t.exposeString('manufacturer', { nullable: true }),
    sizeGb: t.exposeFloat('sizeGb', { nullable: true, description: 'Gigabytes, from the module type\'s size attribute (NetBox 4.3+ profiles); null when NetBox does not say' }),
    type: t.exposeString('type', { nullable: true, description: 'HDD, SSD, NVME... from the module type\'s type attribute' }),
    source: t.field({ type: source, resolve: (d) => d.source }),
    netboxId: t.exposeInt('netboxId', { description: 'The NetBox object\'s id' }),
  }),
});

const NicRef = builder.objectRef<InventoryNic>('ControlNodeNic').implement({
  description: 'An interface of the device (NetBox dcim.interface): a name and MAC for provision\'s selected_nic / selected_nic_mac',
  fields: (t) => ({
    name: t.exposeString('name', { description: 'e.g. enp65s0f0' }),
    label: t.exposeString('label', { nullable: true, description: 'NetBox\'s label (some sites keep the legacy name, e.g. eth0, here)' }),
    macAddress: t.exposeString('macAddress', { nullable: true, description: 'The primary MAC (NetBox 4.2+ primary_mac_address), else mac_address' }),
    type: t.exposeString('type', { nullable: true, description: 'NetBox\'s interface type value, e.g. 25gbase-x-sfp28' }),
    speedMbps: t.exposeInt('speedMbps', { nullable: true }),
    mgmtOnly: t.exposeBoolean('mgmtOnly', { description: 'Management only (the BMC\'s own port, typically): not for the OS' }),
    enabled: t.exposeBoolean('enabled'),
    netboxId: t.exposeInt('netboxId'),
  }),
});

const GpuRef = builder.objectRef<InventoryGpu>('ControlNodeGpu').implement({
  description: 'A GPU of the device, as NetBox records it (for provision\'s gpu_passthrough)',
  fields: (t) => ({
    name: t.exposeString('name'),
    model: t.exposeString('model', { nullable: true }),
    serial: t.exposeString('serial', { nullable: true }),
    manufacturer: t.exposeString('manufacturer', { nullable: true }),
    partId: t.exposeString('partId', { nullable: true }),
    memoryGb: t.exposeFloat('memoryGb', { nullable: true, description: 'From the module type\'s memory attribute, when NetBox has it' }),
    source: t.field({ type: source, resolve: (g) => g.source }),
    netboxId: t.exposeInt('netboxId'),
  }),
});

const InventoryRef = builder.objectRef<ControlNodeInventory>('ControlNodeInventory').implement({
  description: 'The NetBox device whose BMC has this address (through ipam/ip-addresses and the interface it is assigned to), with its disks, NICs and GPUs',
  fields: (t) => ({
    bmcIp: t.exposeString('bmcIp'),
    deviceId: t.exposeInt('deviceId', { description: 'NetBox\'s device id (provision\'s device_id)' }),
    deviceName: t.exposeString('deviceName', { nullable: true }),
    serialNumber: t.exposeString('serialNumber', { description: 'The device\'s serial in NetBox (empty when none)' }),
    bmcInterface: t.exposeString('bmcInterface', { nullable: true, description: 'The interface NetBox assigns the BMC address to' }),
    disks: t.field({ type: [DiskRef], resolve: (i) => i.disks }),
    nics: t.field({ type: [NicRef], resolve: (i) => i.nics }),
    gpus: t.field({ type: [GpuRef], resolve: (i) => i.gpus }),
    fetchedAt: t.field({ type: 'DateTime', resolve: (i) => i.fetchedAt, description: 'When NetBox answered (answers are reused for NETBOX_CACHE_MS)' }),
  }),
});

builder.queryField('controlNodeInventory', (t) =>
  t.field({
    type: InventoryRef,
    args: { bmcIp: t.arg.string({ required: true, description: 'The BMC\'s IP address' }) },
    description: 'A control node\'s disks, NICs and GPUs from NetBox, found by its BMC address. NOT_FOUND when NetBox has no device with that BMC address; INVALID_CONFIG when NetBox is not configured or refuses the token; UPSTREAM_UNAVAILABLE when NetBox is unreachable, too slow or failing. Needs a platform-scoped grant.',
    resolve: (_root, args, ctx) => {
      decide(requirePrincipal(ctx), 'read', { type: 'platform' });
      if (!ctx.inventory) throw new AppError('INVALID_CONFIG', 'this process serves no control-node inventory');
      return ctx.inventory.forBmc(args.bmcIp, 'bmcIp');
    },
  }),
);
