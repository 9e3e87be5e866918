/**
 * Replay as a user makes it: a seed-video session under `reactor run` (a `recording:` section),
 * recorded while a client changes the prompt and resets; the recording's `<name>.session.json`
 * is saved beside its MP4; `reactor replay <log>` (a child process) runs the session again
 * offline: every frame identical to the session's (SHA-256 of the RGB the model made), an MP4
 * written. Bad logs are refused with their codes.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { until } from '@reactor/test-kit';
import { PY, app, cli, startCli } from './helpers.js';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { connect } from '@reactor/client';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function manifest(dir: string): string {
  const file = join(dir, 'reactor.yaml');
  writeFileSync(
    file,
    [
      'model:',
      '  name: seed-video',
      '  resources:',
      '    gpu: { type: NVIDIA_H200, count: 2 }',
      'runtime:',
      `  import: ${join(app, 'dist/index.js')}:VideoApp`,
      `  weights_path: ${join(app, 'weights')}`,
      '  python:',
      `    path: [${join(app, 'worker')}]`,
      'server: { port: 0 }',
      'recording:',
      '  dir: rec',
      '  min_free_bytes: 0',
      '',
    ].join('\n'),
  );
  return file;
}

const replay = (args: string[]) =>
  spawnSync(process.execPath, [cli, 'replay', ...args], { encoding: 'utf8', env: { ...process.env, REACTOR_PYTHON: PY }, timeout: 90_000 });

describe('reactor replay (seed-video)', () => {
  it('saves the session log with a recording and re-renders the session to an MP4, every frame identical; refuses bad logs', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'seed-replay-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const file = manifest(dir);
    const { child, url } = startCli(cleanups, { manifest: file, args: [] });
    const c = await connect(await url, { WebSocket, reconnect: false });
    cleanups.push(() => c.close());
    let frames = 0;
    c.on('frame', () => frames++);
    await until(() => frames >= 8, 'the first frames');
    const rec = await c.recording('start');
    await until(() => frames >= 24, 'frames while recording');
    await await c.send('set_prompt', { prompt: 'A city at night.' }).applied;
    await until(() => frames >= 40, 'frames after the prompt');
    await c.send('reset');
    await until(() => frames >= 56, 'frames after the reset');
    const stopped = await c.recording('stop');
    expect(stopped.name).toBe(rec.name);
    const logFile = join(dir, 'rec', rec.name.replace(/\.mp4$/, '.session.json'));
    await until(() => existsSync(logFile), 'the session log beside the recording');
    const log = JSON.parse(readFileSync(logFile, 'utf8')) as { app: string; commands: { step: number; name: string }[]; frames: unknown[]; steps: number };
    expect(log.app).toBe('seed-video');
    expect(log.commands.map((x) => x.name)).toEqual(['set_prompt', 'reset']);
    expect(log.frames.length).toBeGreaterThanOrEqual(56);
    c.close();
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));

    const out = join(dir, 'again.mp4');
    const r = replay([logFile, '--manifest', file, '--out', out]);
    expect(r.status, `${String(r.error)} ${r.stderr}`).toBe(0);
    const report = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as {
      frames: number;
      identicalFrames: number;
      firstMismatch: number | null;
      mp4Frames: number;
    };
    expect(report.frames).toBe(log.frames.length);
    expect(report.identicalFrames).toBe(report.frames);
    expect(report.firstMismatch).toBeNull();
    expect(report.mp4Frames).toBeGreaterThan(0);
    expect(readFileSync(out).subarray(4, 8).toString('latin1')).toBe('ftyp');

    // Bad logs: not a log; a session a replay cannot follow.
    writeFileSync(join(dir, 'bad.json'), '{"hello": 1}');
    const bad = replay([join(dir, 'bad.json'), '--manifest', file]);
    expect(bad.status).toBe(1);
    expect(bad.stderr).toContain('replay_log_invalid');
    writeFileSync(join(dir, 'rewound.json'), JSON.stringify({ ...log, unreplayable: 'a snapshot was restored before step 9' }));
    const rewound = replay([join(dir, 'rewound.json'), '--manifest', file]);
    expect(rewound.status).toBe(1);
    expect(rewound.stderr).toMatch(/cannot be replayed: a snapshot was restored before step 9.*replay_unsupported/);
  }, 120_000);
});
