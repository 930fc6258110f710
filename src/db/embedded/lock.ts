import fsSync from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { StartupError } from '../../ops/fatal';
import { errno, type Log } from './common';
import { isRunning } from './process';

// ---- the lock on DATA_DIR: one service per DATA_DIR ----

export const LOCK_FILE = 'service.lock';

export interface LockOwner {
  pid: number;
  /** Start time of that process (clock ticks since boot, /proc/<pid>/stat), against pid reuse. */
  start: string | null;
  host: string;
  since: string;
}

function processStart(pid: number): string | null {
  try {
    const stat = fsSync.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Field 22; the command name (field 2) is in parentheses and may hold spaces.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}

function ownerAlive(owner: LockOwner): boolean {
  if (owner.host !== os.hostname()) return true; // a DATA_DIR shared between hosts: we cannot tell, so never take it
  if (!isRunning(owner.pid)) return false;
  const start = processStart(owner.pid);
  return owner.start === null || start === null || start === owner.start;
}

async function readLock(file: string): Promise<LockOwner | null | 'absent'> {
  const text = await fs.readFile(file, 'utf8').catch((error: unknown) => {
    if (errno(error) === 'ENOENT') return null;
    throw error;
  });
  if (text === null) return 'absent';
  try {
    const owner = JSON.parse(text) as LockOwner;
    return Number.isInteger(owner.pid) && owner.pid > 0 ? owner : null;
  } catch {
    return null; // being written this very moment, or garbage
  }
}

/**
 * One service per DATA_DIR: a lock file with the owner's pid and start time. A live owner makes
 * this start refuse at once; a dead one (SIGKILLed, host crashed) leaves a stale lock we take over.
 */
export async function acquireLock(dataDir: string, log: Log): Promise<{ file: string; owner: LockOwner }> {
  const file = path.join(dataDir, LOCK_FILE);
  const me: LockOwner = { pid: process.pid, start: processStart(process.pid), host: os.hostname(), since: new Date().toISOString() };
  for (let attempt = 0; attempt < 20; attempt += 1) {
    try {
      await fs.writeFile(file, JSON.stringify(me) + '\n', { flag: 'wx', mode: 0o644 });
      return { file, owner: me };
    } catch (error) {
      if (errno(error) !== 'EEXIST') throw error;
    }
    const held = await readLock(file);
    if (held === 'absent') continue;
    if (held === null) {
      // Unreadable: another start may be writing it right now; give it a moment, then call it stale.
      if (attempt < 5) {
        await sleep(100);
        continue;
      }
    } else if (ownerAlive(held)) {
      const where = held.host === os.hostname() ? `pid ${held.pid}` : `pid ${held.pid} on host ${held.host}`;
      throw new StartupError(`DATA_DIR ${dataDir} is in use by another running instance (${where}, since ${held.since}): stop that one first, or start this one with another DATA_DIR`);
    } else {
      log.warn({ pid: held.pid, dataDir }, 'the previous service on DATA_DIR is gone (stale lock); taking over');
    }
    await fs.rm(file, { force: true });
  }
  throw new StartupError(`could not take the lock ${file}: remove it if no instance runs on ${dataDir}`);
}

export function releaseLockSync(lock: { file: string; owner: LockOwner }): void {
  try {
    const held = JSON.parse(fsSync.readFileSync(lock.file, 'utf8')) as LockOwner;
    if (held.pid === lock.owner.pid && held.start === lock.owner.start) fsSync.rmSync(lock.file, { force: true });
  } catch {
    // gone already
  }
}
