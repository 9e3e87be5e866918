/** The recordings in a recording folder, with what their description files say. */
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { RecordingInfo } from '@reactor/protocol';

/** Every recording in the folder, newest first: this process's (live ones included) and earlier runs' (`interrupted` when a run died while writing). */
export async function listRecordings(dir: string, retentionMs: number, knownInfo: (name: string) => RecordingInfo | undefined): Promise<RecordingInfo[]> {
  const names = await readdir(dir).catch(() => [] as string[]);
  const out: RecordingInfo[] = [];
  for (const name of names) {
    if (!name.endsWith('.mp4')) continue;
    // This process's: the live recording, or one it stopped.
    const known = knownInfo(name);
    if (known) {
      out.push(known);
      continue;
    }
    const s = await stat(join(dir, name)).catch(() => undefined);
    if (!s) continue;
    let info: Partial<RecordingInfo> = {};
    try {
      info = JSON.parse(await readFile(join(dir, name.replace(/\.mp4$/, '.json')), 'utf8')) as RecordingInfo;
    } catch {
      // No description beside it: what the file itself says.
    }
    const startedAt = info.startedAt ?? s.mtime.toISOString();
    const frames = name.replace(/\.mp4$/, '.frames.jsonl');
    const hasFrames = (await stat(join(dir, frames)).catch(() => undefined))?.isFile() === true;
    out.push({
      name,
      sessionId: info.sessionId ?? '',
      state: info.state === 'recording' ? 'interrupted' : (info.state ?? 'stopped'),
      startedAt,
      bytes: s.size,
      durationS: info.durationS ?? 0,
      deleteAt: new Date(Date.parse(startedAt) + retentionMs).toISOString(),
      ...(hasFrames && { frames }),
    });
  }
  return out.sort((a, b) => b.startedAt.localeCompare(a.startedAt));
}
