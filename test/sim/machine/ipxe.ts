/**
 * What the simulated machine's iPXE makes of the script the service answers: the few commands a
 * metal boot script uses (kernel with its arguments, initrd, boot; or exit), not a whole iPXE.
 */
export interface IpxeBoot {
  script: string;
  kernelUrl: string;
  initrdUrl: string;
  callback: string;
  entryId: string;
  token: string;
}

/** The kernel arguments of an iPXE script that boots the ramdisk, or null for any other script. */
export function parseIpxeScript(script: string): IpxeBoot | null {
  const kernel = /^kernel (\S+) (.*)$/m.exec(script);
  const initrd = /^initrd --name initrd\.img (\S+)$/m.exec(script);
  if (!script.startsWith('#!ipxe\n') || !kernel || !initrd || !/^boot$/m.test(script)) return null;
  const args = Object.fromEntries(kernel[2]!.split(' ').map((a) => [a.split('=')[0]!, a.slice(a.indexOf('=') + 1)]));
  if (!args['metal.callback'] || !args['metal.entry'] || !args['metal.token']) return null;
  return { script, kernelUrl: kernel[1]!, initrdUrl: initrd[1]!, callback: args['metal.callback'], entryId: args['metal.entry'], token: args['metal.token'] };
}
