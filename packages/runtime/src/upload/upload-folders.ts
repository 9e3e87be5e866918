/**
 * The temporary folders uploads are written to: one per session store, removed by the store when
 * it closes, by the `exit` handler when the process exits without that, and by a later process
 * when its owner was killed.
 */
import { rmSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// Folders of live stores, removed synchronously if the process exits without closing them.
const liveFolders = new Set<string>();
let exitHookInstalled = false;
function trackFolder(dir: string): void {
  liveFolders.add(dir);
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const d of liveFolders) {
      try {
        rmSync(d, { recursive: true, force: true });
      } catch {
        // nothing more can be done while exiting
      }
    }
  });
}

/** `reactor-uploads-<pid>-XXXXXX`: the owner's pid, so a later process can tell a dead owner's folder. */
const FOLDER_PREFIX = 'reactor-uploads-';
const swept = new Set<string>();

/**
 * Removes the upload folders under `parent` whose owning process is gone: one killed with
 * SIGKILL (or by the OOM killer) could not remove its own. Once per parent folder and process.
 * A folder whose pid is alive, or belongs to another user's process, is left alone.
 */
async function sweepOrphans(parent: string): Promise<void> {
  if (swept.has(parent)) return;
  swept.add(parent);
  await sweepOrphanUploadFolders(parent);
}

/**
 * Removes the upload folders under `parent` (default `os.tmpdir()`) whose owning process is gone,
 * with the files in them: a server killed with SIGKILL leaves its users' files behind. The
 * server calls it when it starts; a store calls it once per parent folder before its first
 * folder. Resolves with the number of folders removed.
 */
export async function sweepOrphanUploadFolders(parent: string = tmpdir()): Promise<number> {
  let names: string[];
  try {
    names = await readdir(parent);
  } catch {
    return 0;
  }
  const removed = await Promise.all(
    names.map(async (name) => {
      const m = /^reactor-uploads-(\d+)-/.exec(name);
      if (!m) return false;
      const pid = Number(m[1]);
      if (pid === process.pid || processAlive(pid)) return false;
      return rm(join(parent, name), { recursive: true, force: true }).then(
        () => true,
        () => false,
      );
    }),
  );
  return removed.filter(Boolean).length;
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it exists, under another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** A new upload folder under `parent` (after sweeping the folders of dead owners there), removed if the process exits before {@link removeUploadFolder}. */
export function createUploadFolder(parent: string): Promise<string> {
  return sweepOrphans(parent)
    .then(() => mkdtemp(join(parent, `${FOLDER_PREFIX}${process.pid}-`)))
    .then((dir) => {
      trackFolder(dir);
      return dir;
    });
}

/** Deletes a folder made by {@link createUploadFolder} with the files in it. */
export async function removeUploadFolder(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true });
  liveFolders.delete(dir);
}
