/**
 * `reactor.yaml` declared once: one class per section, each key with its type, range and doc
 * comment. From these classes come the key checks of `loadManifest()` (an unknown key is refused
 * at every level), the type of the file as written ({@link ManifestDocument}), and the published
 * JSON Schema (`reactor.schema.json`, `manifestJsonSchema()`).
 */
import 'reflect-metadata';
import { Type } from 'class-transformer';
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
} from 'class-validator';
import { MAX_CLIP_SECONDS, VIDEO_CODECS } from '@reactor/server';
import { GPU_ADMIT_MODES, MAX_DEADLINE_P99_INTERVALS, MAX_SESSIONS_PER_GPU } from '@reactor/distributed';
// Constants only: the @reactor/agones entry loads no gRPC until an agent connects.
import { MAX_ALLOCATION_TIMEOUT_MS, MAX_HEALTH_INTERVAL_MS, MIN_HEALTH_INTERVAL_MS } from '@reactor/agones';

export class GpuResources {
  @IsOptional() @IsString() @MinLength(1) type?: string;
  @IsInt() @Min(0) @Max(64) count = 0;
}

export class Resources {
  @IsOptional() @ValidateNested() @Type(() => GpuResources) gpu?: GpuResources;
}

export class ModelSection {
  /** Default: the app's `@reactorApp({ name })`. */
  @IsOptional() @IsString() @Matches(/^[a-z0-9][a-z0-9._-]*$/, { message: 'must be lower-case letters, digits, ".", "_" or "-"' }) name?: string;
  /** Default: the app's `@reactorApp({ version })`. */
  @IsOptional() @IsString() @MinLength(1) version?: string;
  @IsOptional() @IsString() @MaxLength(2000) description?: string;
  @IsOptional() @ValidateNested() @Type(() => Resources) resources?: Resources;
}

/** `runtime.python`: the Python of a Python worker (`pythonWorker()` in the app); see docs/runner.md. */
export class PythonSection {
  /** The interpreter (`python3` by default); `REACTOR_PYTHON` overrides it. */
  @IsOptional() @IsString() @MinLength(1) interpreter?: string;
  /** Folders added to the ranks' import path, relative to reactor.yaml. */
  @IsOptional() @IsArray() @IsString({ each: true }) path?: string[];
  /** The worker `pythonWorker()` runs when the app names none: `module:Class`. */
  @IsOptional()
  @IsString()
  @Matches(/^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$/, {
    message: 'must look like "video_worker:VideoWorker" (module:Class)',
  })
  worker?: string;
  /** `reactor doctor` also checks torch, CUDA and NCCL (default true). */
  @IsOptional() @IsBoolean() torch?: boolean;
}

export class RuntimeSection {
  /** `<module path relative to reactor.yaml>:<export name>`, e.g. `apps/video/dist/app.js:VideoApp`. */
  @IsString() @Matches(/^[^:]+:[A-Za-z_$][\w$]*$/, { message: 'must look like "path/to/module.js:ExportName"' }) import!: string;
  @IsOptional() @IsString() config?: string;
  @IsOptional() @IsString() weights_path?: string;
  /** How long a session outlives its last client, ms (`AppHost`'s `gracePeriodMs`, default 60000). */
  @IsOptional() @IsInt() @Min(0) @Max(3_600_000) session_grace_ms?: number;
  /** The Python of a Python worker (see {@link PythonSection}). */
  @IsOptional() @ValidateNested() @Type(() => PythonSection) python?: PythonSection;
}

/** One rung of `server.video.tiers`. */
export class VideoTierSection {
  @IsString() @Matches(/^[A-Za-z0-9_-]{1,32}$/, { message: 'must be 1-32 letters, digits, "_" or "-"' }) name!: string;
  @IsNumber() @Min(0.01) @Max(1) scale!: number;
  @IsInt() @Min(10_000) @Max(200_000_000) bitrate!: number;
}

/** `server.video`: see `ServerOptions.video`. */
export class VideoSection {
  @IsOptional() @IsIn([...VIDEO_CODECS]) codec?: 'jpeg' | 'h264' | 'vp8';
  @IsOptional() @IsArray() @ValidateNested({ each: true }) @Type(() => VideoTierSection) tiers?: VideoTierSection[];
  @IsOptional() @IsInt() @Min(1) @Max(100_000) key_frame_interval?: number;
  @IsOptional() @IsInt() @Min(1) @Max(1000) framerate?: number;
}

/** One STUN/TURN server of `server.webrtc.ice_servers` (as `RTCIceServer`). */
export class IceServerSection {
  /** `stun:host:port`, `turn:host:port?transport=udp`, `turns:...`; one URL or a list. */
  @IsDefined() urls!: string | string[];
  @IsOptional() @IsString() username?: string;
  /** TURN credential; prefer `REACTOR_WEBRTC_ICE_SERVERS` over writing it here. */
  @IsOptional() @IsString() credential?: string;
}

/**
 * `server.webrtc`: the WebRTC transport (docs/webrtc.md). Each key can also come from the
 * environment, which wins: `REACTOR_WEBRTC_ENABLED`, `REACTOR_WEBRTC_ICE_SERVERS` (JSON),
 * `REACTOR_WEBRTC_UDP_PORT_RANGE` (`min-max`), `REACTOR_WEBRTC_PORT`,
 * `REACTOR_WEBRTC_ADVERTISE_ADDRESS`, `REACTOR_WEBRTC_ICE_TRANSPORT_POLICY`,
 * `REACTOR_WEBRTC_CLIENT_ICE_SERVERS` (JSON), `REACTOR_WEBRTC_TURN_SECRET`.
 */
export class WebRtcSection {
  /** Whether clients may move their media to WebRTC (default true). */
  @IsOptional() @IsBoolean() enabled?: boolean;
  @IsOptional() @IsArray() @ValidateNested({ each: true }) @Type(() => IceServerSection) ice_servers?: IceServerSection[];
  /** The servers clients get in `welcome.webrtc` (default: `ice_servers`): a TURN's public name, say. */
  @IsOptional() @IsArray() @ValidateNested({ each: true }) @Type(() => IceServerSection) client_ice_servers?: IceServerSection[];
  /** coturn's `static-auth-secret`: TURN servers written without credentials get time-limited ones per client; prefer `REACTOR_WEBRTC_TURN_SECRET`. */
  @IsOptional() @IsString() turn_secret?: string;
  /** How long a minted TURN credential is valid, seconds (default 86400). */
  @IsOptional() @IsInt() turn_credential_ttl_s?: number;
  /** `[min, max]`: the UDP ports peer connections bind (open them in the firewall / the pod). */
  @IsOptional() @IsArray() @IsInt({ each: true }) udp_port_range?: [number, number];
  /** One fixed UDP port (one peer connection at a time); prefer `udp_port_range`. */
  @IsOptional() @IsInt() @Min(1) @Max(65535) port?: number;
  /** The address to advertise as an extra host candidate (a pod's node address, a NAT's public address). */
  @IsOptional() @IsString() advertise_address?: string;
  @IsOptional() @IsIn(['all', 'relay']) ice_transport_policy?: 'all' | 'relay';
  /** How long ICE and DTLS may take, ms (default 10000). */
  @IsOptional() @IsInt() connect_timeout_ms?: number;
}

/**
 * `server.auth`: signed session tokens (see docs/security.md). Keys may also come from the
 * environment (`REACTOR_AUTH_SECRET`, `REACTOR_AUTH_PUBLIC_KEY`, `REACTOR_AUTH_PRIVATE_KEY`,
 * `REACTOR_AUTH_JWKS_URL`), which wins over the manifest.
 */
export class AuthSection {
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

/**
 * `server:`. Each key is a `ServerOptions` one in snake_case (see {@link SERVER_OPTION_KEYS}): the
 * types are checked here, the ranges by the server's own `resolveServerOptions` (one set of checks,
 * named by their manifest key).
 */
export class ServerSection {
  @IsOptional() @IsString() host?: string;
  @IsOptional() @IsInt() @Min(0) @Max(65535) port?: number;
  @IsOptional() @IsString() @MinLength(16, { message: 'must be at least 16 characters' }) token?: string;
  @IsOptional() @IsIn(['jpeg', 'rgb']) encoding?: 'jpeg' | 'rgb';
  @IsOptional() @IsInt() jpeg_quality?: number;
  /** Host names (the `Host` header) the server answers to; see `ServerOptions.allowedHosts`. */
  @IsOptional() @IsArray() @IsString({ each: true }) allowed_hosts?: string[];
  /** Origins whose pages may connect; see `ServerOptions.allowedOrigins`. */
  @IsOptional() @IsArray() @IsString({ each: true }) allowed_origins?: string[];
  /** Largest upload, bytes; see `ServerOptions.maxUploadBytes`. */
  @IsOptional() @IsInt() @Min(1) max_upload_bytes?: number;
  /** Bytes one session's uploads may hold; see `ServerOptions.uploadQuotaBytes`. */
  @IsOptional() @IsInt() @Min(1) upload_quota_bytes?: number;
  @IsOptional() @IsInt() upload_wait_ms?: number;
  @IsOptional() @IsInt() upload_expiry_ms?: number;
  /** Resolved against the manifest's folder. */
  @IsOptional() @IsString() @MinLength(1) upload_dir?: string;
  @IsOptional() @IsInt() max_message_bytes?: number;
  @IsOptional() @IsInt() max_frame_bytes?: number;
  @IsOptional() @IsNumber() command_rate?: number;
  @IsOptional() @IsNumber() command_burst?: number;
  @IsOptional() @IsInt() heartbeat_ms?: number;
  @IsOptional() @IsInt() max_queued_frames?: number;
  @IsOptional() @IsInt() max_buffered_bytes?: number;
  @IsOptional() @IsInt() max_total_buffered_bytes?: number;
  @IsOptional() @IsInt() read_pause_bytes?: number;
  @IsOptional() @IsInt() read_pause_timeout_ms?: number;
  @IsOptional() @IsInt() headers_timeout_ms?: number;
  /** Coded video for clients that select it (default codec `jpeg`: JPEG only). */
  @IsOptional() @ValidateNested() @Type(() => VideoSection) video?: VideoSection;
  /** Signed session tokens. */
  @IsOptional() @ValidateNested() @Type(() => AuthSection) auth?: AuthSection;
  /** The WebRTC transport (on by default). */
  @IsOptional() @ValidateNested() @Type(() => WebRtcSection) webrtc?: WebRtcSection;
  /** One controller at a time, with hand-over (`request_control` / `release_control`). */
  @IsOptional() @IsBoolean() single_controller?: boolean;
  /** How long a dropped client may resume its identity, ms (default 30000; 0: never). */
  @IsOptional() @IsInt() @Min(0) @Max(3_600_000) resume_grace_ms?: number;
  /** End the session after this long without input from any client, ms. */
  @IsOptional() @IsInt() @Min(1) @Max(86_400_000) idle_timeout_ms?: number;
  /** The longest a session may last, ms. */
  @IsOptional() @IsInt() @Min(1) @Max(7 * 86_400_000) max_session_ms?: number;
}

/** `recording:`: clips and session recordings (see `ServerOptions.recording`, docs/protocol.md "Clips and recordings"). */
export class RecordingSection {
  /** Folder of recordings and clip files, relative to reactor.yaml (default `recordings`). */
  @IsOptional() @IsString() @MinLength(1) dir?: string;
  @IsOptional() @IsBoolean() clips?: boolean;
  @IsOptional() @IsNumber() @Min(1) @Max(MAX_CLIP_SECONDS) clip_seconds?: number;
  @IsOptional() @IsInt() @Min(65_536) clip_max_bytes?: number;
  @IsOptional() @IsNumber() @Min(1) @Max(30 * 86_400) clip_expiry_s?: number;
  @IsOptional() @IsBoolean() record?: boolean;
  @IsOptional() @IsInt() @Min(65_536) max_bytes?: number;
  @IsOptional() @IsNumber() @Min(1) @Max(7 * 86_400) max_duration_s?: number;
  @IsOptional() @IsNumber() @Min(1) @Max(3650 * 86_400) retention_s?: number;
  @IsOptional() @IsInt() @Min(0) min_free_bytes?: number;
  /** Write `<name>.frames.jsonl` (each frame's time, seq and metadata) beside each recording. */
  @IsOptional() @IsBoolean() frame_metadata?: boolean;
}

/** `agones:`: run as an Agones GameServer (see docs/scale-out.md); `reactor run --agones` turns it on too. */
export class AgonesSection {
  @IsOptional() @IsBoolean() enabled?: boolean;
  @IsOptional() @IsIn(['ready', 'shutdown']) on_session_end?: 'ready' | 'shutdown';
  @IsOptional() @IsInt() @Min(MIN_HEALTH_INTERVAL_MS) @Max(MAX_HEALTH_INTERVAL_MS) health_interval_ms?: number;
  @IsOptional() @IsInt() @Min(1) @Max(MAX_ALLOCATION_TIMEOUT_MS) allocation_timeout_ms?: number;
}

/**
 * `snapshots:`: the rewind ring of an app that takes snapshots (`@reactorApp({ snapshot })`,
 * docs/snapshots.md); each key given here overrides the app's own setting.
 */
export class SnapshotsSection {
  /** A snapshot before every Nth step that made output (the app's `everySteps`, default 8). */
  @IsOptional() @IsInt() @Min(1) @Max(1_000_000) every_steps?: number;
  /** Bytes one session's ring may hold; the oldest go first, the newest is always kept (default 64 MiB). */
  @IsOptional() @IsInt() @Min(1) ring_bytes?: number;
  /** The largest one snapshot may be: past it the ring stops with `snapshot_too_big` (default 32 MiB). */
  @IsOptional() @IsInt() @Min(1) max_bytes?: number;
  /** Sustained rewinds per session, bursts of 3 (default 2). */
  @IsOptional() @IsNumber() @Min(0.001) @Max(1000) rewinds_per_second?: number;
}

/**
 * `gpu:`: several sessions on one GPU (issue 42, docs/gpu-selection.md). The instances that share
 * a GPU (time-slicing or MPS) each take one of its `sessions_per_gpu` slots before they are ready;
 * one without a slot answers `/health/ready` 503 `gpu_full` and refuses a client that would start
 * a session with the `gpu_full` error. `REACTOR_GPU_SLOT_DIR` and `REACTOR_GPU_DEVICE` override
 * `slot_dir` and `device`. `admit: deadline` also holds new sessions off (`gpu_busy`) while a
 * session on the GPU misses its frame deadline (`deadline_p99_intervals`, less the margin).
 */
export class GpuSection {
  /** At most this many sessions run on the GPU at once, across every instance that shares it. */
  @IsDefined() @IsInt() @Min(1) @Max(MAX_SESSIONS_PER_GPU) sessions_per_gpu!: number;
  /** The folder the instances share for the slot files (default `<tmpdir>/reactor-gpu-slots`), relative to reactor.yaml. */
  @IsOptional() @IsString() @MinLength(1) slot_dir?: string;
  /** The GPU's identity, the same in every instance that shares it (default: `NVIDIA_VISIBLE_DEVICES`, else `CUDA_VISIBLE_DEVICES`, else `0`). */
  @IsOptional()
  @IsString()
  @Matches(/^[A-Za-z0-9._:,-]{1,128}$/, { message: 'must be a GPU index or UUID (letters, digits, ".", "_", ":", ",", "-")' })
  device?: string;
  /** `count` (default): the slots alone; `deadline`: the slots, and no new session while a session on the GPU misses its frame deadline. */
  @IsOptional() @IsIn(GPU_ADMIT_MODES) admit?: (typeof GPU_ADMIT_MODES)[number];
  /** `admit: deadline`'s deadline: a session's frame-time p99 may be this many frame intervals (above 1; default 1.5). */
  @IsOptional() @IsNumber() @Min(1) @Max(MAX_DEADLINE_P99_INTERVALS) deadline_p99_intervals?: number;
  /** `admit: deadline`'s margin: a new session starts while every p99 is at most the deadline less this (that stays at least 1; default 0.25). */
  @IsOptional() @IsNumber() @Min(0) @Max(MAX_DEADLINE_P99_INTERVALS) deadline_margin_intervals?: number;
}

/** `reactor.yaml` as written: its top-level sections. */
export class ManifestDocument {
  @IsOptional() @ValidateNested() @Type(() => ModelSection) model?: ModelSection;
  @IsDefined() @ValidateNested() @Type(() => RuntimeSection) runtime!: RuntimeSection;
  @IsOptional() @ValidateNested() @Type(() => ServerSection) server?: ServerSection;
  @IsOptional() @ValidateNested() @Type(() => AgonesSection) agones?: AgonesSection;
  @IsOptional() @ValidateNested() @Type(() => RecordingSection) recording?: RecordingSection;
  @IsOptional() @ValidateNested() @Type(() => SnapshotsSection) snapshots?: SnapshotsSection;
  @IsOptional() @ValidateNested() @Type(() => GpuSection) gpu?: GpuSection;
}

/** Every section class, for the JSON Schema (each a definition named after its class). */
export const MANIFEST_SECTIONS = [
  ManifestDocument,
  ModelSection,
  Resources,
  GpuResources,
  RuntimeSection,
  PythonSection,
  ServerSection,
  VideoSection,
  VideoTierSection,
  WebRtcSection,
  IceServerSection,
  AuthSection,
  RecordingSection,
  AgonesSection,
  SnapshotsSection,
  GpuSection,
] as const;
