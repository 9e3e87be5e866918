/** The HTTP doors of clips and recordings: the clip files, the recordings listing and the recording files. */
import { stat } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join } from 'node:path';
import type { RecordingInfo } from '@reactor/protocol';
import { ServerErrorCode } from '../base/errors.js';
import type { ClipStore } from './clip-store.js';
import { sendFile } from './files.js';

/**
 * `GET /clips/<id>.mp4`, `GET /recordings` (the listing), `GET /recordings/<name>` (a file: the
 * `.mp4`, or its `.frames.jsonl` when `recording.frame_metadata` wrote one);
 * the caller has checked access. Returns false for any other path.
 */
export async function serveRecordingFiles(
  req: IncomingMessage,
  res: ServerResponse,
  pathname: string,
  files: { readonly store: ClipStore; readonly dir: string; list(): Promise<RecordingInfo[]> },
): Promise<boolean> {
  const json = (status: number, body: unknown): true => {
    res.statusCode = status;
    res.setHeader('Content-Type', 'application/json; charset=utf-8');
    res.setHeader('Cache-Control', 'no-store');
    res.end(JSON.stringify(body));
    return true;
  };
  const clip = /^\/clips\/([A-Za-z0-9_-]{1,64})\.mp4$/.exec(pathname);
  if (clip) {
    const c = files.store.get(clip[1]!);
    if (c === 'expired')
      return json(410, {
        error: { code: ServerErrorCode.ClipExpired, message: 'this clip expired and was deleted (recording.clip_expiry_s); ask for a new clip' },
      });
    if (!c)
      return json(404, {
        error: { code: ServerErrorCode.NotFound, message: 'no clip at this URL: clip URLs are the ones `clip` answers, and a restarted server forgets them' },
      });
    sendFile(req, res, c.path, c.bytes, `clip-${clip[1]!.slice(0, 8)}.mp4`);
    return true;
  }
  if (pathname === '/recordings') return json(200, { recordings: await files.list() });
  const rec = /^\/recordings\/([\w.-]{1,200}\.(?:mp4|frames\.jsonl))$/.exec(pathname);
  if (rec && !rec[1]!.startsWith('.')) {
    const path = join(files.dir, rec[1]!);
    const s = await stat(path).catch(() => undefined);
    if (!s?.isFile()) return json(404, { error: { code: ServerErrorCode.NotFound, message: `no recording ${rec[1]}; GET /recordings lists them` } });
    sendFile(req, res, path, s.size, rec[1]!);
    return true;
  }
  return false;
}
