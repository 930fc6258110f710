import { AppError } from '../src/errors';
import { BOOT_PURPOSES, REPORT_KINDS } from '../src/modules/boot/entries';
import { checkReport, reportAllowed, wipeVerdict, type WipeReport } from '../src/modules/boot/reports';
import { parseIpxeScript } from './sim/machine/ipxe';
import { NO_ENTRY_SCRIPT } from '../src/modules/boot/routes';

const disk = (serial: string, mode: WipeReport['disks'][number]['mode'], attested = true) => ({ serial, mode, attested, method: 'm' });

describe('wipeVerdict: ready only with an attested record for every disk, in the mode asked', () => {
  it('every disk attested in the mode: attested', () => {
    expect(wipeVerdict(['A', 'B'], 'secure-erase', [{ disks: [disk('A', 'secure-erase')] }, { disks: [disk('B', 'secure-erase')] }]))
      .toEqual({ attested: true, missing: [], unattested: [], weaker: [] });
  });

  it('names the disks missing, unattested, or wiped in another mode', () => {
    const verdict = wipeVerdict(['A', 'B', 'C', 'D'], 'secure-erase', [{ disks: [disk('A', 'secure-erase'), disk('B', 'secure-erase', false), disk('C', 'quick')] }]);
    expect(verdict).toEqual({ attested: false, missing: ['D'], unattested: ['B'], weaker: ['C'] });
  });

  it('a later record of a disk replaces an earlier one (a retried erase), both ways', () => {
    expect(wipeVerdict(['A'], 'quick', [{ disks: [disk('A', 'quick', false)] }, { disks: [disk('A', 'quick')] }]).attested).toBe(true);
    expect(wipeVerdict(['A'], 'quick', [{ disks: [disk('A', 'quick')] }, { disks: [disk('A', 'quick', false)] }]).unattested).toEqual(['A']);
  });

  it('any erase is a quick one; a secure erase and a crypto-erase do not stand in for each other', () => {
    expect(wipeVerdict(['A'], 'quick', [{ disks: [disk('A', 'crypto-erase')] }]).attested).toBe(true);
    expect(wipeVerdict(['A'], 'crypto-erase', [{ disks: [disk('A', 'secure-erase')] }]).weaker).toEqual(['A']);
    expect(wipeVerdict(['A'], 'secure-erase', [{ disks: [disk('A', 'crypto-erase')] }]).weaker).toEqual(['A']);
  });

  it('no disk to wipe is attested by nothing; extra disks reported do not matter', () => {
    expect(wipeVerdict([], 'quick', []).attested).toBe(true);
    expect(wipeVerdict(['A'], 'quick', [{ disks: [disk('A', 'quick'), disk('Z', 'quick', false)] }]).attested).toBe(true);
    expect(wipeVerdict(['A'], 'quick', []).missing).toEqual(['A']);
  });
});

describe('the reports each boot purpose takes', () => {
  it('heartbeat and step from every purpose; inventory, dcgm and wipe only where they mean something', () => {
    const table = Object.fromEntries(BOOT_PURPOSES.map((p) => [p, REPORT_KINDS.filter((k) => reportAllowed(p, k))]));
    expect(table).toEqual({
      inspect: ['heartbeat', 'inventory', 'step'],
      commission: ['heartbeat', 'inventory', 'step', 'dcgm', 'wipe'],
      release: ['heartbeat', 'step', 'wipe'],
      rescue: ['heartbeat', 'step'],
      deploy: ['heartbeat', 'step'],
      retire: ['heartbeat', 'step', 'wipe'],
    });
  });
});

describe('checkReport', () => {
  it('stores MACs and the UUID as the node holds them, and keeps everything else as sent', () => {
    const out = checkReport('inventory', {
      uuid: 'ABCDEF01-2345-4678-9ABC-DEF012345678', nics: [{ mac: '525400ABCDEF', speedMbps: 0 }], cpus: [{ model: 'x', cores: 1, threads: 1 }], memoryMiB: 1, disks: [],
    });
    expect(out).toEqual({ uuid: 'abcdef01-2345-4678-9abc-def012345678', nics: [{ mac: '52:54:00:ab:cd:ef', speedMbps: 0 }], cpus: [{ model: 'x', cores: 1, threads: 1 }], memoryMiB: 1, disks: [] });
  });

  it('a refusal is INVALID_INPUT naming the field, and never quotes a value it refuses for its characters', () => {
    try {
      checkReport('step', { name: 'secret\u0000value', status: 'started' });
      throw new Error('not refused');
    } catch (error) {
      expect(error).toBeInstanceOf(AppError);
      expect((error as AppError).extensions).toMatchObject({ code: 'INVALID_INPUT', details: { field: 'body.name' } });
      expect((error as AppError).message).not.toContain('secret');
    }
  });
});

describe('the iPXE scripts as the simulated machine reads them', () => {
  it('the no-entry script boots nothing; a script missing a kernel argument is not a ramdisk boot', () => {
    expect(parseIpxeScript(NO_ENTRY_SCRIPT)).toBeNull();
    const good = '#!ipxe\nkernel http://s/k initrd=initrd.img metal.callback=http://s/boot/v1/entries/e metal.entry=e metal.token=mbt_t\ninitrd --name initrd.img http://s/i\nboot\n';
    expect(parseIpxeScript(good)).toMatchObject({ kernelUrl: 'http://s/k', initrdUrl: 'http://s/i', callback: 'http://s/boot/v1/entries/e', entryId: 'e', token: 'mbt_t' });
    expect(parseIpxeScript(good.replace(' metal.token=mbt_t', ''))).toBeNull();
    expect(parseIpxeScript(good.replace('boot\n', ''))).toBeNull();
    expect(parseIpxeScript(good.replace('#!ipxe\n', ''))).toBeNull();
  });
});
