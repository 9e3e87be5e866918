/** Disk helpers of the recording folder: free space, and serving a file with HTTP ranges. */
import { createReadStream } from 'node:fs';
import { statfs } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';

/** Free bytes for an unprivileged writer on the disk that holds `dir`. */
export async function freeBytes(dir: string): Promise<number> {
  const s = await statfs(dir);
  return s.bavail * s.bsize;
}

/** Whether an error is "no space left" (ENOSPC) or "quota exceeded" (EDQUOT). */
export function isDiskFull(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return code === 'ENOSPC' || code === 'EDQUOT';
}

/**
 * Sends a file (`video/mp4`), honouring a single `Range: bytes=a-b` (what `<video>` asks when it
 * seeks); `HEAD` sends the headers only.
 */
export function sendFile(req: IncomingMessage, res: ServerResponse, path: string, size: number, filename: string): void {
  res.setHeader('Content-Type', filename.endsWith('.jsonl') ? 'application/x-ndjson' : 'video/mp4');
  res.setHeader('Accept-Ranges', 'bytes');
  res.setHeader('Cache-Control', 'private, no-store');
  res.setHeader('Content-Disposition', `inline; filename="${filename.replace(/[^\w.-]/g, '_')}"`);
  let start = 0;
  let end = size - 1;
  const range = /^bytes=(\d*)-(\d*)$/.exec(String(req.headers.range ?? '').trim());
  if (range && (range[1] !== '' || range[2] !== '')) {
    if (range[1] === '') {
      start = Math.max(0, size - Number(range[2]));
    } else {
      start = Number(range[1]);
      if (range[2] !== '') end = Math.min(end, Number(range[2]));
    }
    if (start > end || start >= size) {
      res.statusCode = 416;
      res.setHeader('Content-Range', `bytes */${size}`);
      return void res.end();
    }
    res.statusCode = 206;
    res.setHeader('Content-Range', `bytes ${start}-${end}/${size}`);
  } else {
    res.statusCode = 200;
  }
  res.setHeader('Content-Length', String(end - start + 1));
  if (req.method === 'HEAD' || size === 0) return void res.end();
  const stream = createReadStream(path, { start, end });
  stream.on('error', () => res.destroy());
  stream.pipe(res);
}
