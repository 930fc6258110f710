import { BmcError, type BmcEndpoint, type BootDevice, type DriverResult, type PowerAction } from '../../clients/bmc/driver';
import type { DriverInterface, DriverRegistry, NodeBindings } from '../../clients/bmc/registry';
import type { CommandKind, CommandResult } from '../modules/sites/commands';

/** The driver interface each command kind runs through (the node's driverBindings pick the driver). */
export const COMMAND_INTERFACE: Readonly<Record<CommandKind, DriverInterface>> = {
  'bmc.power': 'power',
  'bmc.power-state': 'power',
  'bmc.boot-device': 'management',
  'bmc.inventory': 'management',
  'bmc.media-insert': 'virtualMedia',
  'bmc.media-eject': 'virtualMedia',
};

const POWER_ACTIONS: readonly string[] = ['on', 'off', 'graceful-off', 'reset', 'graceful-restart', 'cycle', 'nmi'];
const BOOT_DEVICES: readonly string[] = ['pxe', 'disk', 'cd', 'bios'];

export interface ExecutableCommand {
  id: string;
  kind: string;
  params: Record<string, unknown>;
}

/**
 * A driver's error text is the BMC's or the transport's, and some echo what they were sent: the
 * password never leaves the agent, in a result, a note or a log line.
 */
export function redact(text: string, secret: string): string {
  // A secret of one or two characters cannot be told from ordinary letters: masking each
  // occurrence garbled every message and spelled the secret out by its gaps. The client's own
  // redaction skips them too (client.ts error()).
  return secret.length >= 3 ? text.split(secret).join('[redacted]') : text;
}

const isKind = (kind: string): kind is CommandKind => Object.prototype.hasOwnProperty.call(COMMAND_INTERFACE, kind);

/**
 * Runs one command through the driver its node's bindings name and turns whatever happened into
 * the CommandResult the agent reports: a BmcError keeps its code, anything else is AGENT_ERROR.
 * The same function for a remote agent and the built-in one.
 */
export async function executeCommand(
  registry: DriverRegistry,
  command: ExecutableCommand,
  bmc: BmcEndpoint,
  bindings: Partial<NodeBindings>,
  signal?: AbortSignal,
): Promise<CommandResult> {
  try {
    if (!isKind(command.kind)) throw new BmcError('BMC_UNSUPPORTED', `this agent does not know the command kind ${command.kind}`);
    const driver = registry.resolve(bindings, COMMAND_INTERFACE[command.kind]);
    // The command's id is the one intended action it names: a driver sends it on every
    // destructive request, so a BMC (or the simulator) can tell a repeat from a new action.
    const opts = { signal, idempotencyKey: command.id };
    const params = command.params;
    // A driver's result as the agent reports it: value where there is one, notes and an unverified
    // reason redacted (a driver's text may echo what it was sent).
    const done = (result: DriverResult<unknown>): CommandResult => ({
      ok: true,
      ...(result.value !== undefined && result.value !== null ? { value: result.value } : {}),
      notes: result.notes.map((n) => redact(n, bmc.password)),
      ...(result.unverified ? { unverified: redact(result.unverified, bmc.password) } : {}),
    });
    switch (command.kind) {
      case 'bmc.power': {
        if (typeof params.action !== 'string' || !POWER_ACTIONS.includes(params.action)) throw new BmcError('BMC_UNSUPPORTED', `params.action ${String(params.action)} is not a power action`);
        const result = await driver.power(bmc, params.action as PowerAction, opts);
        return done(result);
      }
      case 'bmc.power-state':
        return { ok: true, value: await driver.powerState(bmc, opts) };
      case 'bmc.boot-device': {
        if (typeof params.device !== 'string' || !BOOT_DEVICES.includes(params.device)) throw new BmcError('BMC_UNSUPPORTED', `params.device ${String(params.device)} is not a boot device`);
        const mode = { persistent: params.persistent === true, ...(typeof params.uefi === 'boolean' ? { uefi: params.uefi } : {}) };
        const result = await driver.setBootDevice(bmc, params.device as BootDevice, mode, opts);
        return done(result);
      }
      case 'bmc.media-insert': {
        if (typeof params.imageUrl !== 'string' || !params.imageUrl) throw new BmcError('BMC_UNSUPPORTED', 'params.imageUrl is missing');
        return done(await driver.insertMedia(bmc, params.imageUrl, opts));
      }
      case 'bmc.media-eject': {
        return done(await driver.ejectMedia(bmc, opts));
      }
      case 'bmc.inventory': {
        return done(await driver.inventory(bmc, opts));
      }
    }
  } catch (error) {
    // One line, short: a driver's message is the place a target's text could reach lastError.
    const message = redact(error instanceof Error ? error.message : String(error), bmc.password).replace(/[\u0000-\u001f\u007f]+/g, ' ').slice(0, 600) || 'the driver failed without a message';
    if (error instanceof BmcError) return { ok: false, code: error.code, message, retryable: error.retryable };
    return { ok: false, code: 'AGENT_ERROR', message, retryable: false };
  }
}
