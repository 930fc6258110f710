/**
 * What a simulated machine's ramdisk finds in-band: the CPUs, memory and disks of the DMTF mockup
 * its BMC serves (so the out-of-band and in-band views agree, as on a real machine), with the
 * machine's own UUID and MACs. Computed once per mockup: 1,000 machines share it.
 */
import { loadMockup, members, normalize, type Doc, type MockupName } from '../redfish/mockup';
import type { InventoryReport } from '../../../src/modules/boot/reports';

export type Hardware = Pick<InventoryReport, 'cpus' | 'memoryMiB' | 'disks' | 'gpus'>;

const cache = new Map<MockupName, Hardware>();

const link = (doc: Doc | undefined, key: string): string | null => {
  const value = doc?.[key] as { '@odata.id'?: string } | undefined;
  return value?.['@odata.id'] ? normalize(value['@odata.id']) : null;
};

/** Disks with their serials: Storage's Drives when the mockup has them, else SimpleStorage's devices. */
function disksOf(docs: Map<string, Doc>, system: Doc, machineSerial: string): InventoryReport['disks'] {
  const disks: InventoryReport['disks'] = [];
  const storage = link(system, 'Storage');
  for (const controller of members(storage ? docs.get(storage) : undefined)) {
    for (const ref of (docs.get(controller)?.Drives ?? []) as { '@odata.id': string }[]) {
      const drive = docs.get(normalize(ref['@odata.id']));
      if (!drive || (drive.Status as Doc | undefined)?.State === 'Absent') continue;
      disks.push({
        name: `sd${String.fromCharCode(97 + disks.length)}`,
        serial: String(drive.SerialNumber ?? `${machineSerial}-${drive.Id}`),
        sizeBytes: Number(drive.CapacityBytes ?? 0),
        ...(drive.Model ? { model: String(drive.Model) } : {}),
      });
    }
  }
  if (disks.length) return disks;
  const simple = link(system, 'SimpleStorage');
  for (const controller of members(simple ? docs.get(simple) : undefined)) {
    for (const device of (docs.get(controller)?.Devices ?? []) as Doc[]) {
      if ((device.Status as Doc | undefined)?.State === 'Absent') continue;
      // SimpleStorage has no serials: the ramdisk reads them from the disks, so the machine makes its own.
      disks.push({
        name: `sd${String.fromCharCode(97 + disks.length)}`,
        serial: `${machineSerial}-D${disks.length}`,
        sizeBytes: Number(device.CapacityBytes ?? 0),
        ...(device.Model ? { model: String(device.Model) } : {}),
      });
    }
  }
  return disks;
}

/**
 * The hardware of the mockup's first ComputerSystem. Disk serials from Storage are the mockup's
 * (every machine of that mockup reports the same drives, as the BMC does); SimpleStorage ones are
 * per machine (`<serial>-D<n>`), so they are computed for each machine but cheap.
 */
export function hardwareOf(mockup: MockupName, machineSerial: string): Hardware {
  let base = cache.get(mockup);
  const docs = loadMockup(mockup);
  const systemPath = members(docs.get('/redfish/v1/Systems'))[0]!;
  const system = docs.get(systemPath)!;
  if (!base) {
    const cpus: InventoryReport['cpus'] = [];
    const gpus: NonNullable<InventoryReport['gpus']> = [];
    const processors = link(system, 'Processors');
    for (const p of members(processors ? docs.get(processors) : undefined)) {
      const cpu = docs.get(p);
      if (!cpu?.Model || (cpu.Status as Doc | undefined)?.State === 'Absent') continue;
      if (cpu.ProcessorType === 'CPU') {
        const cores = Number(cpu.TotalCores ?? 1);
        cpus.push({ model: String(cpu.Model), cores, threads: Math.max(cores, Number(cpu.TotalThreads ?? cores)) });
      } else if (cpu.ProcessorType === 'GPU') {
        gpus.push({ model: String(cpu.Model) });
      }
    }
    const gib = Number((system.MemorySummary as Doc | undefined)?.TotalSystemMemoryGiB ?? 1);
    base = { cpus, memoryMiB: Math.max(1, Math.round(gib * 1024)), disks: [], ...(gpus.length ? { gpus } : {}) };
    cache.set(mockup, base);
  }
  return { ...base, disks: disksOf(docs, system, machineSerial) };
}
