/**
 * `reactor.yaml`: the workspace manifest that says which app `reactor run` serves. Read,
 * validated (every problem named by its key path), and resolved against the manifest's folder.
 */
import 'reflect-metadata';
import { readFileSync, existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { plainToInstance } from 'class-transformer';
import { validateSync, getMetadataStorage, type ValidationError } from 'class-validator';
import { parse as parseYaml } from 'yaml';
import { ReactorError, type SnapshotRingOptions } from '@reactor/runtime';
import { resolveServerOptions, type RecordingOptions, type ServeOptions, type VideoOptions } from '@reactor/server';
import { DEFAULT_DEADLINE_MARGIN_INTERVALS, DEFAULT_DEADLINE_P99_INTERVALS } from '@reactor/distributed';
import { webRtcOptions } from './webrtc-env.js';
import { CliErrorCode } from './errors.js';
import { hostProblem, listProblems, originProblem } from './exposure.js';
import {
  type AgonesSection,
  type GpuResources,
  type GpuSection,
  ManifestDocument,
  type RecordingSection,
  type ServerSection,
  type SnapshotsSection,
} from './manifest-sections.js';

/** The manifest file name `reactor` looks for. */
export const MANIFEST_FILE = 'reactor.yaml';

/** Thrown for a missing, unreadable or invalid `reactor.yaml`; the message lists every bad key. */
export class ManifestError extends ReactorError {
  constructor(
    message: string,
    readonly problems: string[] = [],
  ) {
    super(CliErrorCode.ManifestInvalid, message);
  }
}

/**
 * The one path from `server:` to `serve()`: each manifest key and the `ServerOptions` key it sets.
 * A key added to {@link ServerSection} must be added here (the type says so), and reaches the
 * server with no other change.
 */
export const SERVER_OPTION_KEYS = {
  host: 'host',
  port: 'port',
  token: 'token',
  encoding: 'encoding',
  jpeg_quality: 'jpegQuality',
  allowed_hosts: 'allowedHosts',
  allowed_origins: 'allowedOrigins',
  max_upload_bytes: 'maxUploadBytes',
  upload_quota_bytes: 'uploadQuotaBytes',
  upload_wait_ms: 'uploadWaitMs',
  upload_expiry_ms: 'uploadExpiryMs',
  upload_dir: 'uploadDir',
  max_message_bytes: 'maxMessageBytes',
  max_frame_bytes: 'maxFrameBytes',
  command_rate: 'commandRate',
  command_burst: 'commandBurst',
  heartbeat_ms: 'heartbeatMs',
  max_queued_frames: 'maxQueuedFrames',
  max_buffered_bytes: 'maxBufferedBytes',
  max_total_buffered_bytes: 'maxTotalBufferedBytes',
  read_pause_bytes: 'readPauseBytes',
  read_pause_timeout_ms: 'readPauseTimeoutMs',
  headers_timeout_ms: 'headersTimeoutMs',
  video: 'video',
  webrtc: 'webrtc',
  auth: 'auth',
  single_controller: 'singleController',
  resume_grace_ms: 'resumeGraceMs',
  idle_timeout_ms: 'idleTimeoutMs',
  max_session_ms: 'maxSessionMs',
} as const satisfies { [K in keyof Required<ServerSection>]: keyof ServeOptions };

/** The `ServerOptions` that `server:` may set. */
export type ManifestServerOptions = Omit<Pick<ServeOptions, (typeof SERVER_OPTION_KEYS)[keyof typeof SERVER_OPTION_KEYS]>, 'auth'> & {
  /**
   * `server.auth` as written, key files resolved to absolute paths: `reactor run` turns it (and
   * the `REACTOR_AUTH_*` environment, which wins) into `ServerOptions.auth` (`authOptions()`).
   */
  auth?: ManifestAuth;
};

/** `server.auth` in camelCase, key files absolute (their PEM is read by `authOptions()`). */
export interface ManifestAuth {
  secret?: string;
  publicKey?: string;
  privateKey?: string;
  jwksUrl?: string;
  issuer?: string;
  audience?: string;
  maxTtlS?: number;
}

/** A validated manifest with every path resolved to an absolute one. */
export interface Manifest {
  /** Absolute path of the manifest file. */
  file: string;
  /** Folder the relative paths were resolved against. */
  root: string;
  /** `name` and `version` when the manifest gives them (the app's `@reactorApp` ones otherwise). */
  model: { name?: string; version?: string; description?: string; gpu: { type?: GpuResources['type']; count: number } };
  runtime: {
    module: string;
    exportName: string;
    config?: string;
    weightsPath?: string;
    sessionGraceMs?: number;
    /** `runtime.python`, its paths absolute. */
    python?: { interpreter?: string; path: string[]; worker?: string; torch: boolean };
  };
  /** `server:`, as `serve()` takes it (`upload_dir` resolved against {@link Manifest.root}). */
  server: ManifestServerOptions;
  /** The `recording:` section as `ServerOptions.recording` takes it (`dir` absolute); absent: no clips, no recordings. */
  recording?: RecordingOptions;
  /** The `snapshots:` section as `AppHostOptions.snapshots` takes it (absent: the app's own ring settings). */
  snapshots?: SnapshotRingOptions;
  /** `gpu:` (issue 42): the GPU's session slots; absent: no admission, every session starts. */
  gpu?: {
    sessionsPerGpu: number;
    slotDir?: string;
    device?: string;
    /** `gpu.admit` (default `count`). */
    admit: 'count' | 'deadline';
    deadlineP99Intervals?: number;
    marginIntervals?: number;
  };
  /** The `agones:` section (absent keys: the integration's defaults). */
  agones: {
    enabled: boolean;
    onSessionEnd?: AgonesSection['on_session_end'];
    healthIntervalMs?: AgonesSection['health_interval_ms'];
    allocationTimeoutMs?: AgonesSection['allocation_timeout_ms'];
  };
}

/** The keys a section class declares, in declaration order (for "unknown key (allowed: ...)"). */
function keysOf(target: object | undefined): string[] {
  if (!target) return [];
  const metas = getMetadataStorage().getTargetValidationMetadatas(target.constructor, '', true, false);
  return [...new Set(metas.map((m) => m.propertyName))];
}

function flatten(errors: ValidationError[], prefix = ''): string[] {
  return errors.flatMap((e) => {
    const path = prefix ? `${prefix}.${e.property}` : e.property;
    if (e.constraints?.['whitelistValidation'] !== undefined) {
      return [`${path}: unknown ${prefix ? 'key' : 'section'} (allowed: ${keysOf(e.target).join(', ')})`];
    }
    if (e.value === undefined && e.constraints) return [`${path}: is required`];
    // A section (or nested block) written as a scalar or a list: class-validator's own text names no fix.
    if (e.constraints?.['nestedValidation'] !== undefined) {
      const section: unknown = e.target ? Reflect.getMetadata('design:type', e.target, e.property) : undefined;
      const keys = typeof section === 'function' ? keysOf(new (section as new () => object)()) : [];
      return [`${path}: must be a mapping of its keys (${keys.join(', ')}), got ${JSON.stringify(e.value)}`];
    }
    const own = Object.values(e.constraints ?? {}).map((m) => `${path}: ${m.replace(new RegExp(`^${e.property} `), '')}`);
    return [...own, ...flatten(e.children ?? [], path)];
  });
}

/** Finds `reactor.yaml` in `from` or its parents. */
export function findManifest(from = process.cwd()): string | undefined {
  let dir = resolve(from);
  for (;;) {
    const candidate = resolve(dir, MANIFEST_FILE);
    if (existsSync(candidate)) return candidate;
    const up = dirname(dir);
    if (up === dir) return undefined;
    dir = up;
  }
}

/**
 * Reads and validates a manifest.
 * @throws {ManifestError} `manifest_invalid`, naming every bad key and the file.
 */
export function loadManifest(file: string): Manifest {
  const path = resolve(file);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ManifestError(
      `cannot read ${path}: ${(err as Error).message}. Run reactor from the folder that holds ${MANIFEST_FILE} (or below it), or pass --manifest <file>.`,
    );
  }
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (err) {
    throw new ManifestError(`${path} is not valid YAML: ${(err as Error).message}`);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new ManifestError(`${path} must be a YAML mapping with a "runtime" section (and optional "model", "server" and "agones" sections)`);
  }
  const doc = plainToInstance(ManifestDocument, raw);
  // forbidNonWhitelisted: a key no section declares is refused at every level (`server: { prot: 1 }`).
  const problems = flatten(validateSync(doc, { forbidUnknownValues: false, whitelist: true, forbidNonWhitelisted: true }));
  const root = dirname(path);
  const recRaw = (raw as Record<string, unknown>)['recording'];
  const server = doc.server;
  if (Array.isArray(server?.allowed_hosts) && server.allowed_hosts.every((h) => typeof h === 'string')) {
    problems.push(...listProblems(server.allowed_hosts, hostProblem, (i) => `server.allowed_hosts[${i}]`));
  }
  if (Array.isArray(server?.allowed_origins) && server.allowed_origins.every((h) => typeof h === 'string')) {
    problems.push(...listProblems(server.allowed_origins, originProblem, (i) => `server.allowed_origins[${i}]`));
  }
  if (typeof server?.max_upload_bytes === 'number' && typeof server.upload_quota_bytes === 'number' && server.upload_quota_bytes < server.max_upload_bytes) {
    problems.push(`server.upload_quota_bytes: ${server.upload_quota_bytes} is below server.max_upload_bytes (${server.max_upload_bytes}); raise it`);
  }
  problems.push(...gpuProblems(doc.gpu));
  const serverOptions = problems.length === 0 && server ? toServerOptions(server, root) : {};
  // What the field checks cannot see (a range, an empty ladder, a name used twice): the server's own validation.
  if (problems.length === 0) {
    try {
      // `auth` is checked when `reactor run` reads its key files (authOptions()).
      const { auth: _auth, ...checked } = serverOptions;
      resolveServerOptions({ ...checked, insecure: true });
    } catch (err) {
      problems.push(serverProblem((err as Error).message));
    }
  }
  if (problems.length > 0) {
    throw new ManifestError(`${path} is invalid:\n${problems.map((p) => `  - ${p}`).join('\n')}`, problems);
  }
  const [modulePath, exportName] = doc.runtime.import.split(':') as [string, string];
  return {
    file: path,
    root,
    model: {
      ...(doc.model?.name !== undefined && { name: doc.model.name }),
      ...(doc.model?.version !== undefined && { version: doc.model.version }),
      ...(doc.model?.description !== undefined && { description: doc.model.description }),
      gpu: { count: doc.model?.resources?.gpu?.count ?? 0, ...(doc.model?.resources?.gpu?.type !== undefined && { type: doc.model.resources.gpu.type }) },
    },
    runtime: {
      module: resolve(root, modulePath),
      exportName,
      ...(doc.runtime.config !== undefined && { config: resolve(root, doc.runtime.config) }),
      ...(doc.runtime.weights_path !== undefined && { weightsPath: resolve(root, doc.runtime.weights_path) }),
      ...(doc.runtime.session_grace_ms !== undefined && { sessionGraceMs: doc.runtime.session_grace_ms }),
      ...(doc.runtime.python !== undefined && {
        python: {
          ...(doc.runtime.python.interpreter !== undefined && { interpreter: doc.runtime.python.interpreter }),
          path: (doc.runtime.python.path ?? []).map((p) => resolve(root, p)),
          ...(doc.runtime.python.worker !== undefined && { worker: doc.runtime.python.worker }),
          torch: doc.runtime.python.torch ?? true,
        },
      }),
    },
    server: serverOptions,
    ...(recRaw !== undefined && recRaw !== null && { recording: recordingOptions(doc.recording ?? {}, root) }),
    ...(doc.snapshots !== undefined && { snapshots: ringOptions(doc.snapshots) }),
    ...(doc.gpu !== undefined &&
      doc.gpu !== null && {
        gpu: {
          sessionsPerGpu: doc.gpu.sessions_per_gpu,
          ...(doc.gpu.slot_dir !== undefined && { slotDir: resolve(root, doc.gpu.slot_dir) }),
          ...(doc.gpu.device !== undefined && { device: doc.gpu.device }),
          admit: doc.gpu.admit ?? 'count',
          ...(doc.gpu.deadline_p99_intervals !== undefined && { deadlineP99Intervals: doc.gpu.deadline_p99_intervals }),
          ...(doc.gpu.deadline_margin_intervals !== undefined && { marginIntervals: doc.gpu.deadline_margin_intervals }),
        },
      }),
    agones: {
      enabled: doc.agones?.enabled ?? false,
      ...(doc.agones?.on_session_end !== undefined && { onSessionEnd: doc.agones.on_session_end }),
      ...(doc.agones?.health_interval_ms !== undefined && { healthIntervalMs: doc.agones.health_interval_ms }),
      ...(doc.agones?.allocation_timeout_ms !== undefined && { allocationTimeoutMs: doc.agones.allocation_timeout_ms }),
    },
  };
}

/** What the field checks of `gpu:` cannot see: the deadline keys belong to `admit: deadline`, the deadline is above 1 interval, the margin leaves at least 1. */
function gpuProblems(gpu: GpuSection | undefined | null): string[] {
  if (gpu === undefined || gpu === null) return [];
  const { admit, deadline_p99_intervals: deadline, deadline_margin_intervals: margin } = gpu;
  const problems: string[] = [];
  if (admit !== 'deadline') {
    for (const [key, v] of [
      ['deadline_p99_intervals', deadline],
      ['deadline_margin_intervals', margin],
    ] as const) {
      if (v !== undefined) problems.push(`gpu.${key}: only with gpu.admit: deadline (gpu.admit is ${admit ?? 'count, the default'})`);
    }
    return problems;
  }
  const d = deadline ?? DEFAULT_DEADLINE_P99_INTERVALS;
  const m = margin ?? DEFAULT_DEADLINE_MARGIN_INTERVALS;
  if (typeof d !== 'number' || typeof m !== 'number' || !Number.isFinite(d) || !Number.isFinite(m)) return problems;
  if (d <= 1) problems.push(`gpu.deadline_p99_intervals: must be above 1 frame interval (a p99 of 1 interval is a perfect stream), got ${d}`);
  else if (d - m < 1) {
    problems.push(
      `gpu.deadline_margin_intervals: ${m} leaves an admission bound of ${Math.round((d - m) * 100) / 100} frame intervals (gpu.deadline_p99_intervals ${d} less the margin); ` +
        `it must stay at least 1: use at most ${Math.round((d - 1) * 100) / 100}`,
    );
  }
  return problems;
}

/** `server:` as `ServerOptions`, through {@link SERVER_OPTION_KEYS}. */
function toServerOptions(server: ServerSection, root: string): ManifestServerOptions {
  const out: Record<string, unknown> = {};
  for (const [key, option] of Object.entries(SERVER_OPTION_KEYS)) {
    const value = (server as Record<string, unknown>)[key];
    if (value !== undefined) out[option] = value;
  }
  if (server.upload_dir !== undefined) out['uploadDir'] = resolve(root, server.upload_dir);
  if (server.video !== undefined) {
    const v = server.video;
    out['video'] = {
      ...(v.codec !== undefined && { codec: v.codec }),
      ...(v.tiers !== undefined && { tiers: v.tiers.map((t) => ({ name: t.name, scale: t.scale, bitrate: t.bitrate })) }),
      ...(v.key_frame_interval !== undefined && { keyFrameInterval: v.key_frame_interval }),
      ...(v.framerate !== undefined && { framerate: v.framerate }),
    } satisfies VideoOptions;
  }
  const webrtc = webRtcOptions(server.webrtc);
  if (webrtc !== undefined) out['webrtc'] = webrtc;
  if (server.auth !== undefined) {
    const a = server.auth;
    out['auth'] = {
      ...(a.secret !== undefined && { secret: a.secret }),
      ...(a.public_key !== undefined && { publicKey: resolve(root, a.public_key) }),
      ...(a.private_key !== undefined && { privateKey: resolve(root, a.private_key) }),
      ...(a.jwks_url !== undefined && { jwksUrl: a.jwks_url }),
      ...(a.issuer !== undefined && { issuer: a.issuer }),
      ...(a.audience !== undefined && { audience: a.audience }),
      ...(a.max_ttl_s !== undefined && { maxTtlS: a.max_ttl_s }),
    } satisfies ManifestAuth;
  }
  return out as ManifestServerOptions;
}

const VIDEO_OPTION_KEYS: Record<string, string> = {
  keyFrameInterval: 'key_frame_interval',
  framerate: 'framerate',
  codec: 'codec',
  tiers: 'tiers',
  iceServers: 'ice_servers',
  clientIceServers: 'client_ice_servers',
  turnSecret: 'turn_secret',
  turnCredentialTtlS: 'turn_credential_ttl_s',
  udpPortRange: 'udp_port_range',
  advertiseAddress: 'advertise_address',
  iceTransportPolicy: 'ice_transport_policy',
  connectTimeoutMs: 'connect_timeout_ms',
};

/** A `resolveServerOptions` message with its `options.<name>` spelled as the manifest key, e.g. `server.command_rate`. */
function serverProblem(message: string): string {
  const manifestKey = Object.fromEntries(Object.entries(SERVER_OPTION_KEYS).map(([k, v]) => [v, k]));
  return message.replace(/options\.(\w+)(?:\.(\w+))?/g, (_all, name: string, sub: string | undefined) => {
    const key = manifestKey[name] ?? name;
    return sub === undefined ? `server.${key}` : `server.${key}.${VIDEO_OPTION_KEYS[sub] ?? sub}`;
  });
}

/** `recording:` (snake_case, seconds) as `ServerOptions.recording` (camelCase, ms), `dir` resolved against reactor.yaml's folder. */
function recordingOptions(r: RecordingSection, root: string): RecordingOptions {
  const ms = (s: number | undefined): number | undefined => (s === undefined ? undefined : Math.round(s * 1000));
  const o: RecordingOptions = { dir: resolve(root, r.dir ?? 'recordings') };
  if (r.clips !== undefined) o.clips = r.clips;
  if (r.clip_seconds !== undefined) o.clipSeconds = r.clip_seconds;
  if (r.clip_max_bytes !== undefined) o.clipMaxBytes = r.clip_max_bytes;
  if (r.clip_expiry_s !== undefined) o.clipExpiryMs = ms(r.clip_expiry_s)!;
  if (r.record !== undefined) o.record = r.record;
  if (r.max_bytes !== undefined) o.maxBytes = r.max_bytes;
  if (r.max_duration_s !== undefined) o.maxDurationMs = ms(r.max_duration_s)!;
  if (r.retention_s !== undefined) o.retentionMs = ms(r.retention_s)!;
  if (r.min_free_bytes !== undefined) o.minFreeBytes = r.min_free_bytes;
  if (r.frame_metadata !== undefined) o.frameMetadata = r.frame_metadata;
  return o;
}

/** `snapshots:` (snake_case) as `AppHostOptions.snapshots`. */
function ringOptions(s: SnapshotsSection): SnapshotRingOptions {
  return {
    ...(s.every_steps !== undefined && { everySteps: s.every_steps }),
    ...(s.ring_bytes !== undefined && { ringBytes: s.ring_bytes }),
    ...(s.max_bytes !== undefined && { maxBytes: s.max_bytes }),
    ...(s.rewinds_per_second !== undefined && { rewindsPerSecond: s.rewinds_per_second }),
  };
}

/** The manifest `--manifest` names, else the nearest `reactor.yaml`. @throws ManifestError (`manifest_invalid`). */
export function manifestFrom(o: { manifest?: string }): Manifest {
  const file = o.manifest ?? findManifest();
  if (!file) throw new ManifestError(`no ${MANIFEST_FILE} in ${process.cwd()} or its parents; run reactor from your app's workspace or pass --manifest <file>`);
  return loadManifest(file);
}
