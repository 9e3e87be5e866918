import { mkdtempSync, writeFileSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { findManifest, loadManifest, ManifestError } from '../src/manifest.js';

/** Every folder the tests made, removed once they are done. */
const made: string[] = [];
afterAll(() => {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function write(text: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'reactor-manifest-'));
  made.push(dir);
  const file = join(dir, 'reactor.yaml');
  writeFileSync(file, text);
  return file;
}

const good = `
model:
  name: video-demo
  version: 0.1.0
  resources:
    gpu: { type: NVIDIA_H200, count: 2 }
runtime:
  import: apps/video/dist/app.js:VideoApp
  config: apps/video/config.yaml
  weights_path: apps/video/weights
server:
  port: 9000
`;

describe('loadManifest', () => {
  it('reads gpu: (issue 42): sessions_per_gpu, slot_dir against the manifest folder, device; absent: no gpu', () => {
    const file = write(`${good}gpu: { sessions_per_gpu: 3, slot_dir: slots, device: GPU-1a2b }\n`);
    expect(loadManifest(file).gpu).toEqual({ sessionsPerGpu: 3, slotDir: join(file, '..', 'slots'), device: 'GPU-1a2b', admit: 'count' });
    expect(loadManifest(write(good)).gpu).toBeUndefined();
  });

  it('reads gpu.admit: deadline with its deadline and margin, and refuses values that do not fit, naming the key', () => {
    const file = write(`${good}gpu: { sessions_per_gpu: 4, admit: deadline, deadline_p99_intervals: 2, deadline_margin_intervals: 0.5 }\n`);
    expect(loadManifest(file).gpu).toEqual({ sessionsPerGpu: 4, admit: 'deadline', deadlineP99Intervals: 2, marginIntervals: 0.5 });
    expect(loadManifest(write(`${good}gpu: { sessions_per_gpu: 4, admit: deadline }\n`)).gpu).toEqual({ sessionsPerGpu: 4, admit: 'deadline' });
    for (const [gpu, bad] of [
      ['admit: fast', 'gpu.admit: must be one of the following values: count, deadline'],
      ['deadline_p99_intervals: 2', 'gpu.deadline_p99_intervals: only with gpu.admit: deadline (gpu.admit is count, the default)'],
      ['admit: count, deadline_margin_intervals: 0.1', 'gpu.deadline_margin_intervals: only with gpu.admit: deadline (gpu.admit is count)'],
      ['admit: deadline, deadline_p99_intervals: 1', 'gpu.deadline_p99_intervals: must be above 1 frame interval'],
      ['admit: deadline, deadline_p99_intervals: 0.5', 'gpu.deadline_p99_intervals: must not be less than 1'],
      ['admit: deadline, deadline_p99_intervals: 101', 'gpu.deadline_p99_intervals: must not be greater than 100'],
      ['admit: deadline, deadline_p99_intervals: two', 'gpu.deadline_p99_intervals: must be a number'],
      ['admit: deadline, deadline_margin_intervals: 0.6', 'gpu.deadline_margin_intervals: 0.6 leaves an admission bound of 0.9 frame intervals'],
      ['admit: deadline, deadline_p99_intervals: 3, deadline_margin_intervals: 2.5', 'it must stay at least 1: use at most 2'],
      ['admit: deadline, deadline_margin_intervals: -1', 'gpu.deadline_margin_intervals: must not be less than 0'],
    ] as const) {
      const m = write(`${good}gpu: { sessions_per_gpu: 2, ${gpu} }\n`);
      expect(() => loadManifest(m), gpu).toThrow(ManifestError);
      expect(() => loadManifest(m), gpu).toThrow(bad);
    }
  });

  it('resolves every path against the manifest folder', () => {
    const file = write(good);
    const m = loadManifest(file);
    const root = join(file, '..');
    expect(m.model).toEqual({ name: 'video-demo', version: '0.1.0', gpu: { type: 'NVIDIA_H200', count: 2 } });
    expect(m.runtime).toEqual({
      module: join(root, 'apps/video/dist/app.js'),
      exportName: 'VideoApp',
      config: join(root, 'apps/video/config.yaml'),
      weightsPath: join(root, 'apps/video/weights'),
    });
    expect(m.server).toEqual({ port: 9000 });
  });

  it('names every bad key with its path', () => {
    const file = write(`
model:
  name: Bad Name
  version: ''
  resources: { gpu: { count: -1 } }
runtime:
  import: no-export-name.js
server:
  port: 70000
extra: 1
`);
    let err: unknown;
    try {
      loadManifest(file);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ManifestError);
    const e = err as ManifestError;
    expect(e.code).toBe('manifest_invalid');
    expect(e.problems).toMatchInlineSnapshot(`
      [
        "extra: unknown section (allowed: model, runtime, server, agones, recording, snapshots, gpu)",
        "model.name: must be lower-case letters, digits, ".", "_" or "-"",
        "model.version: must be longer than or equal to 1 characters",
        "model.resources.gpu.count: must not be less than 0",
        "runtime.import: must look like "path/to/module.js:ExportName"",
        "server.port: must not be greater than 65535",
      ]
    `);
    expect(e.message).toContain(file);
  });

  it('takes a manifest without model: (name and version come from the app), but not one without runtime:', () => {
    const m = loadManifest(write('runtime: { import: dist/app.js:App }\n'));
    expect(m.model).toEqual({ gpu: { count: 0 } });
    expect(m.runtime.exportName).toBe('App');
    expect(loadManifest(write('model: { resources: { gpu: { count: 2 } } }\nruntime: { import: dist/app.js:App }\n')).model).toEqual({ gpu: { count: 2 } });
    expect(() => loadManifest(write('model: { name: x, version: 1.0.0 }\n'))).toThrow('runtime: is required');
  });

  it('refuses the old build: section, which nothing ever read', () => {
    expect(() => loadManifest(write(`${good}build: { command: make }\n`))).toThrow(
      'build: unknown section (allowed: model, runtime, server, agones, recording, snapshots, gpu)',
    );
  });

  it('reads recording: (seconds to ms, dir against the manifest folder) and rejects unknown keys and bad values', () => {
    const base = 'runtime: { import: app.js:App }\n';
    const file = write(
      `${base}recording:\n  dir: out/rec\n  clip_seconds: 45\n  clip_expiry_s: 3600\n  record: true\n  max_duration_s: 1.5\n  retention_s: 86400\n  min_free_bytes: 0\n  frame_metadata: true\n`,
    );
    expect(loadManifest(file).recording).toEqual({
      dir: join(dirname(file), 'out/rec'),
      clipSeconds: 45,
      clipExpiryMs: 3_600_000,
      record: true,
      maxDurationMs: 1500,
      retentionMs: 86_400_000,
      minFreeBytes: 0,
      frameMetadata: true,
    });
    const empty = write(`${base}recording: {}\n`);
    expect(loadManifest(empty).recording).toEqual({ dir: join(dirname(empty), 'recordings') });
    expect(loadManifest(write(base)).recording).toBeUndefined();
    let err: unknown;
    try {
      loadManifest(write(`${base}recording:\n  clip_seconds: 600\n  record: yes please\n  keep: forever\n`));
    } catch (e) {
      err = e;
    }
    expect((err as ManifestError).problems).toEqual([
      'recording.keep: unknown key (allowed: dir, clips, clip_seconds, clip_max_bytes, clip_expiry_s, record, max_bytes, max_duration_s, retention_s, min_free_bytes, frame_metadata)',
      'recording.clip_seconds: must not be greater than 300',
      'recording.record: must be a boolean value',
    ]);
    expect(() => loadManifest(write(`${base}recording: 30\n`))).toThrow(
      'recording: must be a mapping of its keys (dir, clips, clip_seconds, clip_max_bytes, clip_expiry_s, record, max_bytes, max_duration_s, retention_s, min_free_bytes, frame_metadata), got 30',
    );
  });

  it('reads server.video (codec, tiers, key_frame_interval, framerate) and names each bad value', () => {
    const base = 'runtime: { import: app.js:App }\n';
    const m = loadManifest(
      write(
        `${base}server:\n  video:\n    codec: h264\n    key_frame_interval: 90\n    framerate: 25\n    tiers:\n      - { name: full, scale: 1, bitrate: 3000000 }\n      - { name: small, scale: 0.5, bitrate: 800000 }\n`,
      ),
    );
    expect(m.server).toEqual({
      video: {
        codec: 'h264',
        keyFrameInterval: 90,
        framerate: 25,
        tiers: [
          { name: 'full', scale: 1, bitrate: 3_000_000 },
          { name: 'small', scale: 0.5, bitrate: 800_000 },
        ],
      },
    });
    expect(loadManifest(write(`${base}server: { video: { codec: vp8 } }\n`)).server).toEqual({ video: { codec: 'vp8' } });
    const problems = (yaml: string): string[] => {
      try {
        loadManifest(write(`${base}server: ${yaml}\n`));
      } catch (e) {
        return (e as ManifestError).problems;
      }
      throw new Error('accepted');
    };
    expect(problems('{ video: { codec: h265 } }')).toEqual(['server.video.codec: must be one of the following values: jpeg, h264, vp8']);
    expect(problems('{ video: { codec: h264, keyframes: 3 } }')).toEqual([
      'server.video.keyframes: unknown key (allowed: codec, tiers, key_frame_interval, framerate)',
    ]);
    expect(problems('{ video: { tiers: [{ name: a, scale: 2, bitrate: 1000000 }] } }')).toEqual(['server.video.tiers.0.scale: must not be greater than 1']);
    expect(problems('{ video: { tiers: [{ name: a, scale: 1, bitrate: 1000000 }, { name: a, scale: 0.5, bitrate: 500000 }] } }')).toEqual([
      'server.video.tiers[1].name "a" is used twice; tier names must be unique',
    ]);
    expect(problems('{ video: { tiers: [] } }')).toEqual(['server.video.tiers must be a non-empty array of { name, scale, bitrate }, got []']);
    expect(problems('{ video: h264 }')).toEqual(['server.video: must be a mapping of its keys (codec, tiers, key_frame_interval, framerate), got "h264"']);
  });

  it('reads the upload limits (server.max_upload_bytes, server.upload_quota_bytes) and refuses a quota below the limit', () => {
    const base = 'runtime: { import: app.js:App }\n';
    const m = loadManifest(write(`${base}server: { max_upload_bytes: 1000000, upload_quota_bytes: 5000000 }\n`));
    expect(m.server).toEqual({ maxUploadBytes: 1_000_000, uploadQuotaBytes: 5_000_000 });
    const problems = (yaml: string): string[] => {
      try {
        loadManifest(write(`${base}server: ${yaml}\n`));
      } catch (e) {
        return (e as ManifestError).problems;
      }
      throw new Error('accepted');
    };
    expect(problems('{ max_upload_bytes: 0 }')).toEqual(['server.max_upload_bytes: must not be less than 1']);
    expect(problems('{ max_upload_bytes: 100, upload_quota_bytes: 10 }')).toEqual([
      'server.upload_quota_bytes: 10 is below server.max_upload_bytes (100); raise it',
    ]);
  });

  it('refuses an unknown key at every level, naming the keys that level allows', () => {
    const base = 'runtime: { import: app.js:App }\n';
    const problems = (yaml: string): string[] => {
      try {
        loadManifest(write(yaml));
      } catch (e) {
        return (e as ManifestError).problems;
      }
      throw new Error('accepted');
    };
    expect(problems(`${base}server: { prot: 8080 }\n`)).toEqual([expect.stringMatching(/^server\.prot: unknown key \(allowed: host, port, token, encoding, /)]);
    expect(problems('runtime: { import: app.js:App, weights: w }\n')).toEqual([
      'runtime.weights: unknown key (allowed: import, config, weights_path, session_grace_ms, python)',
    ]);
    expect(problems(`${base}model: { resources: { gpu: { count: 1, kind: h200 } }, cpu: 2 }\n`)).toEqual([
      'model.cpu: unknown key (allowed: name, version, description, resources)',
      'model.resources.gpu.kind: unknown key (allowed: type, count)',
    ]);
    expect(problems(`${base}agones: { enabled: true, helth_interval_ms: 5000 }\n`)).toEqual([
      'agones.helth_interval_ms: unknown key (allowed: enabled, on_session_end, health_interval_ms, allocation_timeout_ms)',
    ]);
  });

  it('reads every server limit into the option serve() takes, and names an out-of-range one by its key', () => {
    const base = 'runtime: { import: app.js:App }\n';
    const file = write(
      `${base}server: { command_rate: 200, command_burst: 400, max_message_bytes: 4096, heartbeat_ms: 5000, max_queued_frames: 4, upload_dir: up, upload_wait_ms: 500, jpeg_quality: 60 }\n`,
    );
    expect(loadManifest(file).server).toEqual({
      commandRate: 200,
      commandBurst: 400,
      maxMessageBytes: 4096,
      heartbeatMs: 5000,
      maxQueuedFrames: 4,
      uploadDir: join(file, '..', 'up'),
      uploadWaitMs: 500,
      jpegQuality: 60,
    });
    expect(() => loadManifest(write(`${base}server: { jpeg_quality: 101 }\n`))).toThrow('server.jpeg_quality must be an integer from 1 to 100, got 101');
    expect(() => loadManifest(write(`${base}server: { command_rate: fast }\n`))).toThrow('server.command_rate: must be a number');
  });

  it('names --manifest (not --config) when the file cannot be read', () => {
    expect(() => loadManifest('/nonexistent/reactor.yaml')).toThrow(/pass --manifest <file>\.$/);
  });

  it('rejects a file that is not a mapping, and invalid YAML, naming the file', () => {
    expect(() => loadManifest(write('- a\n- b\n'))).toThrow(/must be a YAML mapping/);
    expect(() => loadManifest(write('model: [\n'))).toThrow(/is not valid YAML/);
    expect(() => loadManifest('/nonexistent/reactor.yaml')).toThrow(/cannot read \/nonexistent\/reactor\.yaml/);
  });
});

describe('findManifest', () => {
  it('finds reactor.yaml in a parent folder', () => {
    const file = write(good);
    const nested = join(file, '..', 'a', 'b');
    mkdirSync(nested, { recursive: true });
    expect(findManifest(nested)).toBe(file);
  });
});
