/**
 * `reactor run --manifest` refuses a key that `reactor.yaml` does not declare, in every section
 * and at every depth, naming each one (with the keys its level allows) at once, before it loads
 * anything.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const cli = resolve(import.meta.dirname, '../packages/cli/dist/main.js');
const dir = mkdtempSync(join(tmpdir(), 'reactor-run-keys-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('reactor run --manifest: unknown keys', () => {
  it('names a nested unknown key in every section, all at once, and serves nothing', () => {
    const manifest = join(dir, 'reactor.yaml');
    writeFileSync(
      manifest,
      [
        'model:',
        '  resources:',
        '    gpu: { count: 1, kind: H200 }',
        'runtime:',
        '  import: dist/index.js:App',
        '  python: { interpreterr: python3 }',
        'server:',
        '  port: 0',
        '  prot: 8080',
        '  auth: { secrett: x }',
        '  video: { keyframes: 2 }',
        'agones: { helth_interval_ms: 1000 }',
        'recording: { keep: true }',
        '',
      ].join('\n'),
    );
    const r = spawnSync(process.execPath, [cli, 'run', '--manifest', manifest], { cwd: dir, encoding: 'utf8', timeout: 30_000 });
    expect(r.status).toBe(1);
    expect(r.stdout).not.toContain('Viewer:');
    expect(r.stderr).toContain('[manifest_invalid]');
    for (const line of [
      'model.resources.gpu.kind: unknown key (allowed: type, count)',
      'runtime.python.interpreterr: unknown key (allowed: interpreter, path, worker, torch)',
      'server.prot: unknown key (allowed: host, port, token,',
      'server.auth.secrett: unknown key (allowed: secret, public_key, private_key, jwks_url, issuer, audience, max_ttl_s)',
      'server.video.keyframes: unknown key (allowed: codec, tiers, key_frame_interval, framerate)',
      'agones.helth_interval_ms: unknown key (allowed: enabled, on_session_end, health_interval_ms, allocation_timeout_ms)',
      'recording.keep: unknown key (allowed: dir, clips,',
    ]) {
      expect(r.stderr).toContain(line);
    }
  }, 60_000);

  it('snapshots: bad values are named by key before anything loads; the section on an app that takes no snapshots is refused with the fix', () => {
    const bad = join(dir, 'bad-snapshots.yaml');
    writeFileSync(
      bad,
      ['runtime:', '  import: dist/index.js:App', 'snapshots:', '  every_steps: 0', '  ring_bytes: 1.5', '  rewind_roles: [viewer]', ''].join('\n'),
    );
    const r = spawnSync(process.execPath, [cli, 'run', '--manifest', bad], { cwd: dir, encoding: 'utf8', timeout: 30_000 });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('[manifest_invalid]');
    expect(r.stderr).toContain('snapshots.every_steps: must not be less than 1');
    expect(r.stderr).toContain('snapshots.ring_bytes: must be an integer number');
    expect(r.stderr).toContain('snapshots.rewind_roles: unknown key (allowed: every_steps, ring_bytes, max_bytes, rewinds_per_second)');

    // apps/camera declares no @reactorApp({ snapshot }).
    const camera = resolve(import.meta.dirname, '../apps/camera');
    const none = join(dir, 'no-snapshots.yaml');
    writeFileSync(
      none,
      [
        'runtime:',
        `  import: ${join(camera, 'dist/index.js')}:CameraApp`,
        `  config: ${join(camera, 'config.yaml')}`,
        'snapshots:',
        '  every_steps: 2',
        '',
      ].join('\n'),
    );
    const n = spawnSync(process.execPath, [cli, 'run', '--manifest', none, '--port', '0'], { cwd: dir, encoding: 'utf8', timeout: 60_000 });
    expect(n.status).toBe(1);
    expect(n.stdout).not.toContain('Viewer:');
    expect(n.stderr).toContain('[invalid_host_option]');
    expect(n.stderr).toContain('but CameraApp takes no snapshots: add @reactorApp({ snapshot: {} }) to the app');
  }, 90_000);
});
