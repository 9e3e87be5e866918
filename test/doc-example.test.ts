/**
 * The example in docs/runtime.md is a real file (test/doc-example/video-app.ts) that the doc
 * includes verbatim, and it runs: a real DistributedRunner on two CPU ranks, hosted in-process
 * by an AppHost, delivers exactly the frames its model made, in order. (The example used to hand
 * the playout a view into shared memory, which the next generate() overwrote: delivered frames
 * skipped ahead without any error.)
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { command, RecordingSink, useHosts } from '@reactor/runtime/testing';
import { VideoApp } from './doc-example/video-app.js';
import { FRAMES_PER_CALL } from './doc-example/video-worker.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** Every `<!-- include: path -->` in docs/*.md, with the code block that follows it. */
function includes(): Array<{ doc: string; path: string; block: string | undefined }> {
  const found: Array<{ doc: string; path: string; block: string | undefined }> = [];
  for (const doc of readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md'))) {
    const text = readFileSync(join(root, 'docs', doc), 'utf8');
    for (const m of text.matchAll(/<!-- include: (\S+) -->\n(?:```\w*\n([\s\S]*?)```\n)?/g)) {
      found.push({ doc: `docs/${doc}`, path: m[1]!, block: m[2] });
    }
  }
  return found;
}

describe('docs/runtime.md example', () => {
  it('is included verbatim from test/doc-example/video-app.ts', () => {
    const all = includes();
    expect(all.map((i) => `${i.doc} <- ${i.path}`)).toContain('docs/runtime.md <- test/doc-example/video-app.ts');
    for (const inc of all) {
      expect(inc.block, `${inc.doc}: the code block after the include of ${inc.path}`).toBe(readFileSync(join(root, inc.path), 'utf8'));
    }
  });

  const start = useHosts(afterEach);

  it('delivers exactly the frames the model made, in order, with a real runner on CPU ranks', async () => {
    const host = start(VideoApp, { gracePeriodMs: 0, weightsPath: root });
    await host.load();
    const sink = new RecordingSink();
    const client = host.connect(sink);
    await sink.waitForSession('streaming');
    // Several calls' worth: the model runs up to bufferSize (32) frames ahead of playout, so
    // frames kept as views into shared memory would show a later call's pixels by now.
    const count = 6 * FRAMES_PER_CALL;
    await sink.waitForFrames(count, { timeoutMs: 20_000 });
    const frames = sink.frames.slice(0, count);
    const size = 8 * 8 * 3;
    expect(frames.map((f) => [f.track, f.width, f.height, f.rgb.length])).toEqual(frames.map(() => ['main_video', 8, 8, size]));
    expect(frames.map((f) => f.seq)).toEqual(frames.map((_, i) => i));
    // Frame n is n % 256 in every byte but its first four, which hold n.
    const made = frames.map((f) => new DataView(f.rgb.buffer, f.rgb.byteOffset, 4).getUint32(0, true));
    expect(made).toEqual(frames.map((_, i) => i));
    for (const [i, f] of frames.entries())
      expect(
        f.rgb.subarray(4).every((b) => b === i % 256),
        `frame ${i}'s pixels`,
      ).toBe(true);
    // The event the example declares works on the real runner: a new rollout starts at frame 0.
    const from = sink.events.length;
    expect(await client.command(command('1', 'reset'))).toEqual({ type: 'reply', id: '1' });
    const flush = (await sink.waitForMessage((m) => m.type === 'flush', { from })) as { nextSeq: number };
    const after = await sink.waitFor((e) => e.kind === 'frame' && e.frame.seq >= flush.nextSeq, { from });
    expect(after.kind === 'frame' && new DataView(after.frame.rgb.buffer, after.frame.rgb.byteOffset, 4).getUint32(0, true)).toBe(0);
  });
});
