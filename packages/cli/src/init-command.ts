/** `reactor init`: the bin's side (prints what was written and what to run next). */
import { initProject, type InitOptions } from './init.js';

/** `reactor init <dir> [--template] [--gpus] [--name]`. */
export async function initCommand(dir: string | undefined, o: Omit<InitOptions, 'dir'>): Promise<void> {
  const r = await initProject({ ...o, dir: dir ?? '' });
  process.stdout.write(
    `Created ${r.name} (template ${r.template}${r.mode === 'workspace' ? ', a workspace app' : ''}) in ${r.dir}\n\nNext:\n${r.nextSteps.map((s) => `  ${s}\n`).join('')}`,
  );
}
