/**
 * `reactor.yaml`: the workspace manifest that says which app `reactor run` serves. Read,
 * validated (every problem named by its key path), and resolved against the manifest's folder.
 */
import 'reflect-metadata';
import { readFileSync, existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { plainToInstance, Type } from 'class-transformer';
import {
  IsArray,
  IsBoolean,
  IsDefined,
  IsIn,
  IsInt,
  IsNumber,
  IsOptional,
  IsString,
  Matches,
  Max,
  MaxLength,
  Min,
  MinLength,
  ValidateNested,
  validateSync,
  type ValidationError,
} from 'class-validator';
import { parse as parseYaml } from 'yaml';
import { ReactorError } from '@reactor/runtime';
import { VIDEO_CODECS, resolveVideoOptions, type VideoOptions } from '@reactor/server';
import { CliErrorCode } from './errors.js';
// Constants only: the @reactor/agones entry loads no gRPC until an agent connects.
import { MAX_ALLOCATION_TIMEOUT_MS, MAX_HEALTH_INTERVAL_MS, MIN_HEALTH_INTERVAL_MS } from '@reactor/agones';
import { hostProblem, listProblems, originProblem } from './exposure.js';

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

class GpuResources {
  @IsOptional() @IsString() @MinLength(1) type?: string;
  @IsInt() @Min(0) @Max(64) count = 0;
}

class Resources {
  @IsOptional() @ValidateNested() @Type(() => GpuResources) gpu?: GpuResources;
}

class ModelSection {
  /** Default: the app's `@reactorApp({ name })`. */
  @IsOptional() @IsString() @Matches(/^[a-z0-9][a-z0-9._-]*$/, { message: 'must be lower-case letters, digits, ".", "_" or "-"' }) name?: string;
  /** Default: the app's `@reactorApp({ version })`. */
  @IsOptional() @IsString() @MinLength(1) version?: string;
  @IsOptional() @IsString() @MaxLength(2000) description?: string;
  @IsOptional() @ValidateNested() @Type(() => Resources) resources?: Resources;
}

class RuntimeSection {
  /** `<module path relative to reactor.yaml>:<export name>`, e.g. `apps/video/dist/app.js:VideoApp`. */
  @IsString() @Matches(/^[^:]+:[A-Za-z_$][\w$]*$/, { message: 'must look like "path/to/module.js:ExportName"' }) import!: string;
  @IsOptional() @IsString() config?: string;
  @IsOptional() @IsString() weights_path?: string;
  /** How long a session outlives its last client, ms (`AppHost`'s `gracePeriodMs`, default 60000). */
  @IsOptional() @IsInt() @Min(0) @Max(3_600_000) session_grace_ms?: number;
}

/** One rung of `server.video.tiers`. */
class VideoTierSection {
  @IsString() @Matches(/^[A-Za-z0-9_-]{1,32}$/, { message: 'must be 1-32 letters, digits, "_" or "-"' }) name!: string;
  @IsNumber() @Min(0.01) @Max(1) scale!: number;
  @IsInt() @Min(10_000) @Max(200_000_000) bitrate!: number;
}

/** `server.video`: see `ServerOptions.video`. */
class VideoSection {
  @IsOptional() @IsIn([...VIDEO_CODECS]) codec?: 'jpeg' | 'h264' | 'vp8';
  @IsOptional() @IsArray() @ValidateNested({ each: true }) @Type(() => VideoTierSection) tiers?: VideoTierSection[];
  @IsOptional() @IsInt() @Min(1) @Max(100_000) key_frame_interval?: number;
  @IsOptional() @IsInt() @Min(1) @Max(1000) framerate?: number;
}

/** The keys `server.video` takes. */
const VIDEO_KEYS = ['codec', 'tiers', 'key_frame_interval', 'framerate'];

/**
 * `server.auth`: signed session tokens (see docs/security.md). Keys may also come from the
 * environment (`REACTOR_AUTH_SECRET`, `REACTOR_AUTH_PUBLIC_KEY`, `REACTOR_AUTH_PRIVATE_KEY`,
 * `REACTOR_AUTH_JWKS_URL`), which wins over the manifest.
 */
class AuthSection {
  /** HMAC secret (HS256); prefer `REACTOR_AUTH_SECRET` over writing it here. */
  @IsOptional() @IsString() @MinLength(32, { message: 'must be at least 32 characters (openssl rand -base64 32)' }) secret?: string;
  /** Ed25519 public key file (PEM), relative to reactor.yaml: checks EdDSA tokens. */
  @IsOptional() @IsString() @MinLength(1) public_key?: string;
  /** Ed25519 private key file (PEM), relative to reactor.yaml: `reactor token` signs with it (the server never reads it). */
  @IsOptional() @IsString() @MinLength(1) private_key?: string;
  /** A platform's JWKS (http(s) URL): checks the tokens it mints. */
  @IsOptional() @IsString() @Matches(/^https?:\/\//, { message: 'must be an http(s):// URL' }) jwks_url?: string;
  @IsOptional() @IsString() @MinLength(1) issuer?: string;
  @IsOptional() @IsString() @MinLength(1) audience?: string;
  /** Longest token lifetime accepted, seconds (at most 21600, 6 h). */
  @IsOptional() @IsInt() @Min(1) @Max(21_600) max_ttl_s?: number;
}

/** The keys `server.auth` takes. */
const AUTH_KEYS = ['secret', 'public_key', 'private_key', 'jwks_url', 'issuer', 'audience', 'max_ttl_s'];
/** The keys `server` takes. */
const SERVER_KEYS = [
  'host',
  'port',
  'token',
  'encoding',
  'allowed_hosts',
  'allowed_origins',
  'max_upload_bytes',
  'upload_quota_bytes',
  'video',
  'auth',
  'single_controller',
  'resume_grace_ms',
  'idle_timeout_ms',
  'max_session_ms',
];

class ServerSection {
  @IsOptional() @IsString() host?: string;
  @IsOptional() @IsInt() @Min(0) @Max(65535) port?: number;
  @IsOptional() @IsString() @MinLength(16, { message: 'must be at least 16 characters' }) token?: string;
  @IsOptional() @IsIn(['jpeg', 'rgb']) encoding?: 'jpeg' | 'rgb';
  /** Host names (the `Host` header) the server answers to; see `ServerOptions.allowedHosts`. */
  @IsOptional() @IsArray() @IsString({ each: true }) allowed_hosts?: string[];
  /** Origins whose pages may connect; see `ServerOptions.allowedOrigins`. */
  @IsOptional() @IsArray() @IsString({ each: true }) allowed_origins?: string[];
  /** Largest upload, bytes; see `ServerOptions.maxUploadBytes`. */
  @IsOptional() @IsInt() @Min(1) max_upload_bytes?: number;
  /** Bytes one session's uploads may hold; see `ServerOptions.uploadQuotaBytes`. */
  @IsOptional() @IsInt() @Min(1) upload_quota_bytes?: number;
  /** Coded video for clients that select it (default codec `jpeg`: JPEG only). */
  @IsOptional() @ValidateNested() @Type(() => VideoSection) video?: VideoSection;
  /** Signed session tokens. */
  @IsOptional() @ValidateNested() @Type(() => AuthSection) auth?: AuthSection;
  /** One controller at a time, with hand-over (`request_control` / `release_control`). */
  @IsOptional() @IsBoolean() single_controller?: boolean;
  /** How long a dropped client may resume its identity, ms (default 30000; 0: never). */
  @IsOptional() @IsInt() @Min(0) @Max(3_600_000) resume_grace_ms?: number;
  /** End the session after this long without input from any client, ms. */
  @IsOptional() @IsInt() @Min(1) @Max(86_400_000) idle_timeout_ms?: number;
  /** The longest a session may last, ms. */
  @IsOptional() @IsInt() @Min(1) @Max(7 * 86_400_000) max_session_ms?: number;
}

/** `agones:`: run as an Agones GameServer (see docs/scale-out.md); `reactor run --agones` turns it on too. */
class AgonesSection {
  @IsOptional() @IsBoolean() enabled?: boolean;
  @IsOptional() @IsIn(['ready', 'shutdown']) on_session_end?: 'ready' | 'shutdown';
  @IsOptional() @IsInt() @Min(MIN_HEALTH_INTERVAL_MS) @Max(MAX_HEALTH_INTERVAL_MS) health_interval_ms?: number;
  @IsOptional() @IsInt() @Min(1) @Max(MAX_ALLOCATION_TIMEOUT_MS) allocation_timeout_ms?: number;
}

class ManifestDocument {
  @IsOptional() @ValidateNested() @Type(() => ModelSection) model?: ModelSection;
  @IsDefined() @ValidateNested() @Type(() => RuntimeSection) runtime!: RuntimeSection;
  @IsOptional() @ValidateNested() @Type(() => ServerSection) server?: ServerSection;
  @IsOptional() @ValidateNested() @Type(() => AgonesSection) agones?: AgonesSection;
}

/** The manifest's top-level sections. */
const SECTIONS = ['model', 'runtime', 'server', 'agones'];
/** The keys of the `agones:` section. */
const AGONES_KEYS = ['enabled', 'on_session_end', 'health_interval_ms', 'allocation_timeout_ms'];

/** A validated manifest with every path resolved to an absolute one. */
export interface Manifest {
  /** Absolute path of the manifest file. */
  file: string;
  /** Folder the relative paths were resolved against. */
  root: string;
  /** `name` and `version` when the manifest gives them (the app's `@reactorApp` ones otherwise). */
  model: { name?: string; version?: string; description?: string; gpu: { type?: string; count: number } };
  runtime: { module: string; exportName: string; config?: string; weightsPath?: string; sessionGraceMs?: number };
  server: {
    host?: string;
    port?: number;
    token?: string;
    encoding?: 'jpeg' | 'rgb';
    allowedHosts?: string[];
    allowedOrigins?: string[];
    maxUploadBytes?: number;
    uploadQuotaBytes?: number;
    /** `server.video`, as `ServerOptions.video` takes it. */
    video?: VideoOptions;
    /** `server.auth`, key files resolved to absolute paths. */
    auth?: {
      secret?: string;
      publicKey?: string;
      privateKey?: string;
      jwksUrl?: string;
      issuer?: string;
      audience?: string;
      maxTtlS?: number;
    };
    singleController?: boolean;
    resumeGraceMs?: number;
    idleTimeoutMs?: number;
    maxSessionMs?: number;
  };
  /** The `agones:` section (absent keys: the integration's defaults). */
  agones: { enabled: boolean; onSessionEnd?: 'ready' | 'shutdown'; healthIntervalMs?: number; allocationTimeoutMs?: number };
}

function flatten(errors: ValidationError[], prefix = ''): string[] {
  return errors.flatMap((e) => {
    const path = prefix ? `${prefix}.${e.property}` : e.property;
    if (e.value === undefined && e.constraints) return [`${path}: is required`];
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
  const problems = flatten(validateSync(doc, { forbidUnknownValues: false }));
  const r = raw as Record<string, unknown>;
  for (const key of Object.keys(r)) if (!SECTIONS.includes(key)) problems.push(`${key}: unknown section (allowed: ${SECTIONS.join(', ')})`);
  const agonesRaw = r['agones'];
  if (typeof agonesRaw === 'object' && agonesRaw !== null && !Array.isArray(agonesRaw)) {
    for (const key of Object.keys(agonesRaw)) if (!AGONES_KEYS.includes(key)) problems.push(`agones.${key}: unknown key (allowed: ${AGONES_KEYS.join(', ')})`);
  }
  const serverRaw = r['server'];
  if (typeof serverRaw === 'object' && serverRaw !== null && !Array.isArray(serverRaw)) {
    for (const key of Object.keys(serverRaw)) if (!SERVER_KEYS.includes(key)) problems.push(`server.${key}: unknown key (allowed: ${SERVER_KEYS.join(', ')})`);
    const authRaw = (serverRaw as Record<string, unknown>)['auth'];
    if (typeof authRaw === 'object' && authRaw !== null && !Array.isArray(authRaw)) {
      for (const key of Object.keys(authRaw)) if (!AUTH_KEYS.includes(key)) problems.push(`server.auth.${key}: unknown key (allowed: ${AUTH_KEYS.join(', ')})`);
    }
  }
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
  let video: VideoOptions | undefined;
  const rawVideo = (r['server'] as Record<string, unknown> | undefined)?.['video'];
  if (rawVideo !== undefined) {
    if (typeof rawVideo !== 'object' || rawVideo === null || Array.isArray(rawVideo)) {
      // In place of class-validator's "nested property video must be either object or array".
      const i = problems.findIndex((p) => p.startsWith('server.video: nested property'));
      problems.splice(i < 0 ? problems.length : i, i < 0 ? 0 : 1, `server.video: must be a mapping such as { codec: h264 } (keys: ${VIDEO_KEYS.join(', ')})`);
    } else {
      for (const key of Object.keys(rawVideo))
        if (!VIDEO_KEYS.includes(key)) problems.push(`server.video.${key}: unknown key (allowed: ${VIDEO_KEYS.join(', ')})`);
      const v = server?.video;
      video = {
        ...(v?.codec !== undefined && { codec: v.codec }),
        ...(v?.tiers !== undefined && { tiers: v.tiers.map((t) => ({ name: t.name, scale: t.scale, bitrate: t.bitrate })) }),
        ...(v?.key_frame_interval !== undefined && { keyFrameInterval: v.key_frame_interval }),
        ...(v?.framerate !== undefined && { framerate: v.framerate }),
      };
      // What the field checks above cannot see (an empty ladder, a name used twice): the server's own validation.
      if (problems.length === 0) {
        try {
          resolveVideoOptions(video);
        } catch (err) {
          problems.push((err as Error).message.replace(/options\.video/g, 'server.video'));
        }
      }
    }
  }
  if (problems.length > 0) {
    throw new ManifestError(`${path} is invalid:\n${problems.map((p) => `  - ${p}`).join('\n')}`, problems);
  }
  const root = dirname(path);
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
    },
    server: {
      ...(server?.host !== undefined && { host: server.host }),
      ...(server?.port !== undefined && { port: server.port }),
      ...(server?.token !== undefined && { token: server.token }),
      ...(server?.encoding !== undefined && { encoding: server.encoding }),
      ...(server?.allowed_hosts !== undefined && { allowedHosts: server.allowed_hosts }),
      ...(server?.allowed_origins !== undefined && { allowedOrigins: server.allowed_origins }),
      ...(server?.max_upload_bytes !== undefined && { maxUploadBytes: server.max_upload_bytes }),
      ...(server?.upload_quota_bytes !== undefined && { uploadQuotaBytes: server.upload_quota_bytes }),
      ...(video !== undefined && { video }),
      ...(server?.auth !== undefined && {
        auth: {
          ...(server.auth.secret !== undefined && { secret: server.auth.secret }),
          ...(server.auth.public_key !== undefined && { publicKey: resolve(root, server.auth.public_key) }),
          ...(server.auth.private_key !== undefined && { privateKey: resolve(root, server.auth.private_key) }),
          ...(server.auth.jwks_url !== undefined && { jwksUrl: server.auth.jwks_url }),
          ...(server.auth.issuer !== undefined && { issuer: server.auth.issuer }),
          ...(server.auth.audience !== undefined && { audience: server.auth.audience }),
          ...(server.auth.max_ttl_s !== undefined && { maxTtlS: server.auth.max_ttl_s }),
        },
      }),
      ...(server?.single_controller !== undefined && { singleController: server.single_controller }),
      ...(server?.resume_grace_ms !== undefined && { resumeGraceMs: server.resume_grace_ms }),
      ...(server?.idle_timeout_ms !== undefined && { idleTimeoutMs: server.idle_timeout_ms }),
      ...(server?.max_session_ms !== undefined && { maxSessionMs: server.max_session_ms }),
    },
    agones: {
      enabled: doc.agones?.enabled ?? false,
      ...(doc.agones?.on_session_end !== undefined && { onSessionEnd: doc.agones.on_session_end }),
      ...(doc.agones?.health_interval_ms !== undefined && { healthIntervalMs: doc.agones.health_interval_ms }),
      ...(doc.agones?.allocation_timeout_ms !== undefined && { allocationTimeoutMs: doc.agones.allocation_timeout_ms }),
    },
  };
}
