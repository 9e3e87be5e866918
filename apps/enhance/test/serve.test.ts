// `reactor run` serving the enhance app in a child process (2 CPU ranks on wasm), a Node client
// outside it: frames of the planned output size arrive, the commands change what arrives
// (scale, side by side, pause), and SIGTERM leaves no rank behind.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { until } from '@reactor/test-kit';
import { WebSocket } from 'ws';
import { connect, FrameEncoding } from '@reactor/client';
import { descendants } from '@reactor/distributed/internal';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../../..');
const cli = join(repo, 'packages/cli/dist/main.js');

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function startCli(dir: string): { child: ChildProcess; url: Promise<string>; stderr: () => string } {
  const child = spawn(process.execPath, [cli, 'run', '--manifest', join(dir, 'reactor.yaml')], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  let out = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const url = new Promise<string>((res, rej) => {
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /Viewer: (\S+)/.exec(out);
      if (m) res(m[1]!);
    });
    child.once('exit', (code) => rej(new Error(`reactor run exited with ${code} before printing the viewer URL:\n${err}`)));
  });
  cleanups.push(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return { child, url, stderr: () => err + out };
}

describe('reactor run --manifest (the enhance app)', () => {
  it('streams upscaled frames of the output size to a client, follows set_scale, set_side_by_side and set_paused, and exits cleanly', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'enhance-serve-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, 'config.yaml'), 'model: slim\noutputWidth: 64\noutputHeight: 40\nframesPerStep: 2\nworldSize: 2\ndevices: cpu\nbackend: wasm\n');
    writeFileSync(
      join(dir, 'reactor.yaml'),
      `model: { name: enhance-test, version: 0.0.1 }\nruntime:\n  import: ${join(repo, 'apps/enhance/dist/index.js')}:EnhanceApp\n  config: config.yaml\nserver: { port: 0, encoding: rgb }\n`,
    );
    const { child, url, stderr } = startCli(dir);
    const client = await connect(await url, { WebSocket, reconnect: false });
    cleanups.push(() => client.close());
    expect(client.schema.commands.map((c) => c.name).sort()).toEqual(['set_model', 'set_paused', 'set_scale', 'set_side_by_side']);
    const ranks = descendants(child.pid!).filter((p) => readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('child-main'));
    expect(ranks).toHaveLength(2);
    // The config names the model: the log says so, without "(auto)".
    expect(stderr()).toMatch(/2 CPU rank\(s\) \(no GPU on this machine\); ESRGAN slim at 64x40; starting the runner/);
    // The weights were read from the installed package and their hashes logged.
    expect(stderr()).toMatch(
      /weights ESRGAN slim x4 \(float32, 0\.9 MiB.*\) from .*esrgan-slim\/models\/x4: sha256 [0-9a-f]{64}; files: model\.json=[0-9a-f]{64} group1-shard1of1\.bin=[0-9a-f]{64}/,
    );

    const frames: { w: number; h: number; rgb: Uint8Array; seq: number }[] = [];
    client.on('frame', (f) => {
      expect(f.encoding).toBe(FrameEncoding.Rgb);
      frames.push({ w: f.width, h: f.height, rgb: f.payload.slice(), seq: f.seq });
    });
    const infos: Record<string, unknown>[] = [];
    client.on('message', (m) => {
      if (m.name === 'enhance_info') infos.push(m.data as Record<string, unknown>);
    });
    await until(() => frames.length >= 4, 'the first frames', 60_000);
    expect(frames.slice(0, 4).map((f) => [f.w, f.h, f.rgb.length])).toEqual(Array(4).fill([64, 40, 64 * 40 * 3]));
    await until(() => infos.length > 0, 'the enhance_info message', 60_000);
    expect(infos[0]).toMatchObject({ model: 'slim', scale: 4, input_width: 16, input_height: 10, output_width: 64, output_height: 40, source: 'scene' });
    expect((infos[0]!['ranks'] as { backend: string }[]).map((r) => r.backend)).toEqual(['wasm', 'wasm']);

    // x2: the output keeps its size, the model reads a larger input.
    await client.send('set_scale', { scale: 2 });
    await until(() => infos.some((i) => i['scale'] === 2), 'an enhance_info for x2', 60_000);
    expect(infos.find((i) => i['scale'] === 2)).toMatchObject({ input_width: 32, input_height: 20, output_width: 64, output_height: 40 });

    // A late joiner (a raw socket: it sees every message from its first) learns what runs at once.
    const late = new WebSocket(`${new URL(await url).origin.replace(/^http/, 'ws')}/ws`);
    cleanups.push(() => late.terminate());
    const lateInfo = await new Promise<Record<string, unknown>>((resolve, reject) => {
      late.on('message', (data, binary) => {
        if (binary) return;
        const m = JSON.parse(data.toString()) as { type: string; name?: string; data?: Record<string, unknown> };
        if (m.type === 'message' && m.name === 'enhance_info') resolve(m.data!);
      });
      late.once('error', reject);
    });
    expect(lateInfo).toMatchObject({ model: 'slim', scale: 2, input_width: 32, input_height: 20, output_width: 64, output_height: 40, source: 'scene' });
    expect(stderr()).not.toMatch(/onConnected threw/);
    late.close();
    await expect(client.send('set_scale', { scale: 5 })).rejects.toMatchObject({ code: 'invalid_params' });

    // Side by side: twice as wide.
    const before = frames.length;
    await client.send('set_side_by_side', { side_by_side: true });
    await until(() => frames.slice(before).some((f) => f.w === 128), 'a side-by-side frame', 60_000);
    expect(frames.slice(before).find((f) => f.w === 128)!.rgb.length).toBe(128 * 40 * 3);

    // Paused: the steps stop (a stats window plays nothing and the next one too).
    await client.send('set_paused', { paused: true });
    const quiet = () =>
      new Promise<number>((res) => {
        const off = client.on('stats', (s) => {
          if (s.fps === 0) {
            off();
            res(frames.length);
          }
        });
      });
    await quiet();
    const n = await quiet();
    expect(await quiet()).toBe(n);
    await client.send('set_paused', { paused: false });
    await until(() => frames.length > n + 2, 'frames after unpausing', 60_000);

    client.close();
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    await until(() => ranks.every((p) => descendants(process.pid).indexOf(p) < 0), 'the ranks to be gone', 10_000);
  }, 120_000);
});
