/**
 * `reactor replay <log> [--config other.yaml] [--out file.mp4]` (issue 41, docs/snapshots.md):
 * runs a session again from its session log, offline, in this process: the app of the manifest
 * is loaded (with `--config`, e.g. a higher quality setting), each logged command is applied
 * before the step that first read it in the session, and the first video track's frames are
 * written to an MP4 (the recording muxer). Prints one JSON line: the frames, how many are
 * identical (SHA-256) to the session's, the first that differs, the file.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Logger } from '@reactor/log';
import { AppHost, ReactorError, REWIND_COMMAND, SESSION_LOG_FORMAT, type ClientSink, type OutputFrame, type SessionLogJson } from '@reactor/runtime';
import { RgbMp4File } from '@reactor/server';
import { applyPythonSettings, type CliOptions, configPath, importApp } from './commands.js';
import { CliErrorCode } from './errors.js';
import { manifestFrom } from './manifest.js';

export interface ReplayOptions extends CliOptions {
  /** Where the MP4 goes (default: the log's name with `.replay.mp4`). */
  out?: string;
}

/** What `reactor replay` prints. */
export interface ReplayReport {
  replay: string;
  steps: number;
  frames: number;
  identicalFrames: number;
  /** Index (in the session's frames) of the first frame that differs, or null. */
  firstMismatch: number | null;
  out: string;
  mp4Frames: number;
  mp4Bytes: number;
  config: string | null;
}

function readLog(file: string): SessionLogJson {
  let log: SessionLogJson;
  try {
    log = JSON.parse(readFileSync(file, 'utf8')) as SessionLogJson;
  } catch (err) {
    throw new ReactorError(CliErrorCode.ReplayLogInvalid, `${file} is not a session log: ${(err as Error).message}`);
  }
  if (log?.format !== SESSION_LOG_FORMAT || log.version !== 1 || !Array.isArray(log.commands) || !Array.isArray(log.frames) || typeof log.steps !== 'number') {
    throw new ReactorError(
      CliErrorCode.ReplayLogInvalid,
      `${file} is not a session log of version 1 (a recording's <name>.session.json, written for an app with @reactorApp({ snapshot }))`,
    );
  }
  if (log.unreplayable) throw new ReactorError(CliErrorCode.ReplayUnsupported, `${file} cannot be replayed: ${log.unreplayable}`);
  return log;
}

export async function replayCommand(file: string | undefined, o: ReplayOptions, logger: Logger): Promise<void> {
  if (!file) throw new ReactorError(CliErrorCode.CliUsage, 'reactor replay needs the session log: reactor replay <name>.session.json');
  const log = readLog(resolve(file));
  const m = manifestFrom(o);
  applyPythonSettings(m);
  const App = await importApp(m, { logger });
  const host = new AppHost(App, { logger, gracePeriodMs: 0, ...(m.runtime.weightsPath !== undefined && { weightsPath: m.runtime.weightsPath }) });
  const { app } = host.schema;
  if (app.name !== log.app || app.version !== log.appVersion) {
    await host.close();
    throw new ReactorError(
      CliErrorCode.ReplayUnsupported,
      `the log is of ${log.app} ${log.appVersion}; ${m.file} serves ${app.name} ${app.version}: replay it with the app that made it`,
    );
  }
  const cfg = configPath(o, m);
  const out = resolve(o.out ?? file.replace(/(\.session)?\.json$/, '') + '.replay.mp4');
  try {
    await host.load({ ...(cfg !== undefined && { configPath: cfg }), manifestGpuCount: m.model.gpu.count });
    const report = await drive(host, log, out, cfg ?? null);
    process.stdout.write(`${JSON.stringify(report)}\n`);
  } finally {
    await host.close();
  }
}

/** Runs the session's steps with its commands, writes the frames, compares their hashes. */
async function drive(host: AppHost, log: SessionLogJson, out: string, config: string | null): Promise<ReplayReport> {
  const video = host.schema.tracks.find((t) => t.kind === 'video' && t.direction === 'out');
  const fps = (video as { fps?: number } | undefined)?.fps ?? 24;
  const byStep = new Map<number, Array<{ index: number; c: SessionLogJson['commands'][number] }>>();
  log.commands.forEach((c, index) => byStep.set(c.step, [...(byStep.get(c.step) ?? []), { index, c }]));
  // A logged rewind restored a snapshot taken once `atCommand` commands had run, before step
  // `toStep + 1`: the replay takes its own there (the same state, for a deterministic app) and
  // restores it where the rewind was.
  const takesAt = new Map<number, Set<number>>();
  for (const c of log.commands) {
    if (c.name !== REWIND_COMMAND) continue;
    const { toStep, atCommand } = c.params as { toStep?: unknown; atCommand?: unknown };
    if (!Number.isInteger(toStep) || !Number.isInteger(atCommand) || (atCommand as number) < 0 || (toStep as number) + 1 >= c.step) {
      throw new ReactorError(CliErrorCode.ReplayLogInvalid, `the log's rewind at step ${c.step} names no snapshot before it (${JSON.stringify(c.params)})`);
    }
    const before = (toStep as number) + 1;
    takesAt.set(before, (takesAt.get(before) ?? new Set<number>()).add(atCommand as number));
  }
  if (takesAt.size > 0 && !host.snapshots) {
    throw new ReactorError(CliErrorCode.ReplayUnsupported, 'the log has rewinds, and the app takes no snapshots: replay it with the app that made it');
  }
  const saved = new Map<number, Uint8Array>();
  let mp4: Promise<RgbMp4File> | undefined;
  let writes = Promise.resolve();
  const failures: string[] = [];
  // Frames the session's steps made, played so far, dropped unplayed by flushes; the MP4 gets the
  // first `made - dropped` played frames (those of the logged steps), then the replay ends.
  let played = 0;
  let dropped = 0;
  let wanted = Infinity;
  let resolvePlayed!: () => void;
  const allPlayed = new Promise<void>((r) => (resolvePlayed = r));
  const madeSoFar = (): number => host.snapshots?.log()?.frames.length ?? 0;
  const sink: ClientSink = {
    message: (msg) => {
      if (msg.type === 'flush') dropped += Math.max(0, madeSoFar() - dropped - played);
    },
    frame: (f: OutputFrame) => {
      if (video && f.track !== video.name) return;
      if (played >= wanted) return;
      played++;
      if (played >= wanted) resolvePlayed();
      mp4 ??= RgbMp4File.open(out, f.width, f.height, fps);
      const rgb = f.rgb.slice();
      writes = writes.then(async () => (await mp4!).add(rgb));
    },
    audio: () => undefined,
    close: () => undefined,
  };
  let steps = 0;
  let resolveDone!: () => void;
  const done = new Promise<void>((r) => (resolveDone = r));
  // Each call below queues under the step lock at once, in this order: before step `step`, the
  // logged commands, rewinds and snapshot points run in the session's order.
  const take = (atCommand: number): void => {
    void host.snapshots!.take().then(
      (bytes) => saved.set(atCommand, bytes),
      (err: unknown) => failures.push(`the snapshot at command ${atCommand}: ${(err as Error).message}`),
    );
  };
  const send = (step: number): void => {
    const pending = [...(takesAt.get(step) ?? [])].sort((a, b) => a - b);
    for (const { index, c } of byStep.get(step) ?? []) {
      while (pending.length > 0 && pending[0]! <= index) take(pending.shift()!);
      if (c.name === REWIND_COMMAND) {
        // Taken at an earlier step, so settled by now.
        const bytes = saved.get((c.params as { atCommand: number }).atCommand);
        if (!bytes) {
          failures.push(`step ${step} rewind: its snapshot was not taken`);
          continue;
        }
        void host.snapshots!.restore(bytes).catch((err: unknown) => failures.push(`step ${step} rewind: ${(err as Error).message}`));
        continue;
      }
      void handle.command({ type: 'command', id: `replay-${step}-${index}`, name: c.name, params: c.params }).then((a) => {
        if (a.type === 'error') failures.push(`step ${step} ${c.name}: ${a.code}: ${a.message}`);
      });
    }
    for (const atCommand of pending) take(atCommand);
  };
  // Commands read by step n + 1 go in while step n ends: they run under the step lock before step n + 1.
  const off = host.onStep(() => {
    steps++;
    // Step n's frames are logged once it returns: the session's last step is whole when the next one ends.
    if (steps > log.steps) resolveDone();
    else send(steps + 1);
  });
  const handle = host.connect(sink);
  send(1);
  await done;
  off();
  const replayed = (host.snapshots?.log()?.frames ?? []).filter(([step]) => step <= log.steps);
  // The frames of the last steps play out at the app's fps.
  wanted = replayed.length - dropped;
  if (played >= wanted) resolvePlayed();
  await allPlayed;
  handle.disconnect();
  let identical = 0;
  let firstMismatch: number | null = null;
  for (let i = 0; i < log.frames.length; i++) {
    if (replayed[i]?.[1] === log.frames[i]![1]) identical++;
    else firstMismatch ??= i;
  }
  await writes;
  const written = mp4 ? await (await mp4).close() : { frames: 0, bytes: 0 };
  if (failures.length > 0)
    throw new ReactorError(CliErrorCode.ReplayUnsupported, `replaying the session's commands failed: ${failures.slice(0, 3).join('; ')}`);
  return {
    replay: log.sessionId,
    steps: log.steps,
    frames: log.frames.length,
    identicalFrames: identical,
    firstMismatch,
    out,
    mp4Frames: written.frames,
    mp4Bytes: written.bytes,
    config,
  };
}
