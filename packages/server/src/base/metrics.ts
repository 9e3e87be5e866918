/** Prometheus metrics of one server (a registry per server, so several servers never collide). */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { HostCounterView } from './servable-host.js';

/** Why a frame was not delivered to a client. */
export type DropReason = 'slow_client' | 'flush' | 'disconnected' | 'encode_error' | 'server_budget' | 'awaiting_key' | 'encoder_busy';

/** The metrics a server keeps; `registry.metrics()` renders them for `GET /metrics`. */
export class ServerMetrics {
  readonly registry = new Registry();
  #stepCount: () => number = () => 0;
  #stepsSeen = 0;
  readonly steps: Counter = new Counter({
    name: 'reactor_steps_total',
    help: 'Model steps run (generate calls).',
    registers: [this.registry],
    // Read at scrape time from the host's cumulative count.
    collect: () => {
      const now = this.#stepCount();
      if (now > this.#stepsSeen) this.steps.inc(now - this.#stepsSeen);
      this.#stepsSeen = Math.max(this.#stepsSeen, now);
    },
  });
  readonly stepSeconds = new Histogram({
    name: 'reactor_step_duration_seconds',
    help: 'Model time per step (generate), seconds.',
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [this.registry],
  });
  readonly framesEmitted = new Counter({
    name: 'reactor_frames_emitted_total',
    help: 'Frames played out by the app (counted once, whatever the number of clients).',
    labelNames: ['track'],
    registers: [this.registry],
  });
  /** Frames already counted in {@link framesEmitted} (weak: a frame is forgotten with its last client). */
  readonly #emitted = new WeakSet<object>();
  /**
   * Counts a played-out frame once, whatever the number of clients and whatever they receive
   * (JPEG, H.264, VP8, raw RGB).
   */
  frameEmitted(frame: { readonly track: string }): void {
    if (this.#emitted.has(frame)) return;
    this.#emitted.add(frame);
    this.framesEmitted.inc({ track: frame.track });
  }
  readonly framesSent = new Counter({
    name: 'reactor_frames_sent_total',
    help: 'Frames written to client sockets (one per client per frame).',
    registers: [this.registry],
  });
  readonly framesDropped = new Counter({
    name: 'reactor_frames_dropped_total',
    help: 'Frames not delivered to a client, by reason (encoder_busy: counted once per frame the JPEG encoder, or an H.264/VP8 track encoder, was too far behind to take, whatever the number of clients).',
    labelNames: ['reason'],
    registers: [this.registry],
  });
  readonly audioChunksEmitted = new Counter({
    name: 'reactor_audio_chunks_emitted_total',
    help: 'Audio chunks played out by the app (counted once, whatever the number of clients).',
    labelNames: ['track'],
    registers: [this.registry],
  });
  readonly audioChunksSent = new Counter({
    name: 'reactor_audio_chunks_sent_total',
    help: 'Audio chunks written to client sockets (one per client per chunk).',
    registers: [this.registry],
  });
  readonly audioChunksDropped = new Counter({
    name: 'reactor_audio_chunks_dropped_total',
    help: 'Audio chunks not delivered to a client, by reason (the reasons of frames).',
    labelNames: ['reason'],
    registers: [this.registry],
  });
  readonly encodeSeconds = new Histogram({
    name: 'reactor_frame_encode_seconds',
    help: 'Time to encode one frame (once per frame, shared by all clients), seconds.',
    buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1],
    registers: [this.registry],
  });
  readonly clients = new Gauge({ name: 'reactor_clients', help: 'Connected WebSocket clients.', registers: [this.registry] });
  readonly commands = new Counter({
    name: 'reactor_command_results_total',
    help: 'Command results by code (`ok` for success).',
    labelNames: ['code'],
    registers: [this.registry],
  });
  readonly rejected = new Counter({
    name: 'reactor_connections_rejected_total',
    help: 'Refused or dropped connections by reason.',
    labelNames: ['reason'],
    registers: [this.registry],
  });
  readonly resumes = new Counter({
    name: 'reactor_resumes_total',
    help: 'Reconnections that asked to resume: `resumed` (identity kept) or `new_identity` (grace over or secret unknown).',
    labelNames: ['result'],
    registers: [this.registry],
  });
  readonly uploads = new Counter({
    name: 'reactor_uploads_total',
    help: 'Upload requests by outcome: announced, stored, or the error code that refused them (upload_too_large, upload_type_not_allowed, ...).',
    labelNames: ['outcome'],
    registers: [this.registry],
  });
  readonly uploadBytes = new Counter({
    name: 'reactor_upload_bytes_total',
    help: 'Bytes of uploads stored (complete files only).',
    registers: [this.registry],
  });
  readonly readPauses = new Counter({
    name: 'reactor_read_pauses_total',
    help: 'Times the server stopped reading a client that did not read its answers (back-pressure).',
    registers: [this.registry],
  });

  readonly inputFramesReceived = new Counter({
    name: 'reactor_input_frames_received_total',
    help: 'Binary frames received from clients, by inbound track (`(unknown)` for a frame whose header names no track).',
    labelNames: ['track'],
    registers: [this.registry],
  });
  readonly inputFramesAccepted = new Counter({
    name: 'reactor_input_frames_accepted_total',
    help: 'Inbound frames checked, decoded and handed to the app, by track.',
    labelNames: ['track'],
    registers: [this.registry],
  });
  readonly inputFramesDropped = new Counter({
    name: 'reactor_input_frames_dropped_total',
    help: 'Inbound frames dropped, by track and reason (the error code, `decode_backlog`, `not_accepted`, `disconnected`, or over WebRTC `packet_loss`).',
    labelNames: ['track', 'reason'],
    registers: [this.registry],
  });
  readonly inputDecodeSeconds = new Histogram({
    name: 'reactor_input_decode_seconds',
    help: 'Time to decode one inbound JPEG frame to RGB (on the thread pool), seconds.',
    buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1],
    registers: [this.registry],
  });

  /** Starts the inbound counters of each track at 0, so a scrape shows every track before its first frame. */
  declareInputTracks(names: readonly string[]): void {
    for (const track of names) {
      this.inputFramesReceived.inc({ track }, 0);
      this.inputFramesAccepted.inc({ track }, 0);
    }
  }

  // ---- coded video (H.264 / VP8) --------------------------------------------------------

  #videoClients: () => Iterable<{ codec: string; tier: string }> = () => [];
  readonly videoClients: Gauge = new Gauge({
    name: 'reactor_video_clients',
    help: 'Clients that selected a video codec (select_video), by codec and tier (clients that never did receive JPEG and are not counted).',
    labelNames: ['codec', 'tier'],
    registers: [this.registry],
    collect: () => {
      this.videoClients.reset();
      for (const c of this.#videoClients()) this.videoClients.inc({ codec: c.codec, tier: c.tier });
    },
  });
  readonly videoEncoders = new Gauge({
    name: 'reactor_video_encoders',
    help: 'Open video encoders (one per outbound video track, codec and tier in use), by codec and tier.',
    labelNames: ['codec', 'tier'],
    registers: [this.registry],
  });
  readonly videoFramesEncoded = new Counter({
    name: 'reactor_video_frames_encoded_total',
    help: 'Frames encoded by the video encoders (once per frame and tier, whatever the number of clients).',
    labelNames: ['codec', 'tier'],
    registers: [this.registry],
  });
  readonly videoEncodeSeconds = new Histogram({
    name: 'reactor_video_encode_seconds',
    help: 'Time from handing a frame to its video encoder to its encoded chunk, seconds.',
    labelNames: ['codec', 'tier'],
    buckets: [0.001, 0.002, 0.005, 0.01, 0.02, 0.033, 0.05, 0.1, 0.25, 0.5],
    registers: [this.registry],
  });
  readonly keyFrameRequests = new Counter({
    name: 'reactor_video_key_frame_requests_total',
    help: 'Key frames asked for, by reason: join (a client joined an encoder), request (request_key_frame), drop (a client lost a frame), flush.',
    labelNames: ['reason'],
    registers: [this.registry],
  });
  readonly keyFramesForced = new Counter({
    name: 'reactor_video_key_frames_forced_total',
    help: 'Key frames forced on an encoder (new encoder, joins, losses, requests, flushes; scheduled ones not counted), by codec and tier.',
    labelNames: ['codec', 'tier'],
    registers: [this.registry],
  });
  readonly videoEncoderFailures = new Counter({
    name: 'reactor_video_encoder_failures_total',
    help: 'Video encoders that failed (their clients fell back to JPEG), by codec and tier.',
    labelNames: ['codec', 'tier'],
    registers: [this.registry],
  });

  /** Where `reactor_video_clients` reads each client's selection from, at scrape time. */
  setVideoClients(read: () => Iterable<{ codec: string; tier: string }>): void {
    this.#videoClients = read;
  }

  // ---- measured by the clients (client_stats, issue 26) ----------------------------------

  readonly commandToPixelSeconds = new Histogram({
    name: 'reactor_command_to_pixel_seconds',
    help: 'Client-measured time from sending a command to presenting the first frame that shows it (its applied frame), seconds; by command wire name and transport.',
    labelNames: ['command', 'transport'],
    buckets: [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10, 30, 120],
    registers: [this.registry],
  });
  readonly timeToFirstFrameSeconds = new Histogram({
    name: 'reactor_time_to_first_frame_seconds',
    help: 'Client-measured time from connecting to presenting the first frame, seconds; one per connection, by transport.',
    labelNames: ['transport'],
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600],
    registers: [this.registry],
  });
  readonly clientFreezes = new Counter({
    name: 'reactor_client_freezes_total',
    help: 'Gaps over 200 ms between frames presented by a client while streaming and not paused, by transport.',
    labelNames: ['transport'],
    registers: [this.registry],
  });
  readonly clientFreezeSeconds = new Counter({
    name: 'reactor_client_freeze_seconds_total',
    help: 'Seconds those gaps lasted, by transport.',
    labelNames: ['transport'],
    registers: [this.registry],
  });
  readonly clientFramesDropped = new Counter({
    name: 'reactor_client_frames_dropped_total',
    help: 'Frames a client received and never presented (replaced by a newer one, or undecodable), by transport.',
    labelNames: ['transport'],
    registers: [this.registry],
  });
  readonly clientStatsReports = new Counter({
    name: 'reactor_client_stats_reports_total',
    help: 'client_stats reports received: `accepted` (counted) or `refused` (invalid_client_stats: nothing of it counted).',
    labelNames: ['outcome'],
    registers: [this.registry],
  });

  #readiness: () => { ready: boolean; reasons: readonly { code: string }[] } = () => ({ ready: false, reasons: [] });
  #unsent: () => number = () => 0;
  readonly unsentBytes: Gauge = new Gauge({
    name: 'reactor_unsent_bytes',
    help: 'Bytes handed to client sockets and not yet written, all clients together (bounded by maxTotalBufferedBytes).',
    registers: [this.registry],
    collect: (): void => this.unsentBytes.set(this.#unsent()),
  });
  readonly ready: Gauge = new Gauge({
    name: 'reactor_ready',
    help: 'Whether a new user would get a stream now (1) or not (0); /health/ready answers 200 exactly when this is 1.',
    registers: [this.registry],
    collect: () => {
      const r = this.#readiness();
      this.ready.set(r.ready ? 1 : 0);
      this.notReady.reset();
      for (const reason of r.reasons) this.notReady.set({ reason: reason.code }, 1);
    },
  });
  readonly notReady = new Gauge({
    name: 'reactor_not_ready',
    help: 'Why the instance is not ready: 1 for each current reason (loading, load_failed, runner_unhealthy, ...).',
    labelNames: ['reason'],
    registers: [this.registry],
  });

  /** Where `reactor_ready`, `reactor_not_ready` and `reactor_unsent_bytes` are read from, at scrape time. */
  setReadiness(readiness: () => { ready: boolean; reasons: readonly { code: string }[] }, unsent: () => number): void {
    this.#readiness = readiness;
    this.#unsent = unsent;
  }

  /** Where `reactor_steps_total` reads the host's cumulative step count from, at scrape time. */
  setStepCounter(read: () => number): void {
    this.#stepCount = read;
  }

  // ---- session snapshots (docs/snapshots.md) ------------------------------------------------------

  #snapshotCounters: () => HostCounterView | undefined = () => undefined;
  readonly #snapshotSeen = { taken: 0, failed: 0, rewinds: 0, restarted: 0, rateLimited: 0 };
  readonly snapshotRingBytes: Gauge = new Gauge({
    name: 'reactor_snapshot_ring_bytes',
    help: "Bytes the sessions' rewind rings of snapshots hold now (an app with @reactorApp({ snapshot })).",
    registers: [this.registry],
    collect: () => this.snapshotRingBytes.set(this.#snapshotCounters()?.snapshotBytes ?? 0),
  });
  readonly snapshots: Counter = new Counter({
    name: 'reactor_snapshots_total',
    help: 'Session snapshots for the rewind rings, by outcome (taken, failed).',
    labelNames: ['outcome'],
    registers: [this.registry],
    collect: () => {
      const c = this.#snapshotCounters();
      this.#advance(this.snapshots, 'taken', c?.snapshots ?? 0, { outcome: 'taken' });
      this.#advance(this.snapshots, 'failed', c?.snapshotFailures ?? 0, { outcome: 'failed' });
    },
  });
  readonly rewinds: Counter = new Counter({
    name: 'reactor_rewinds_total',
    help: 'Rewinds made (the built-in rewind command restored a snapshot).',
    registers: [this.registry],
    collect: () => this.#advance(this.rewinds, 'rewinds', this.#snapshotCounters()?.rewinds ?? 0),
  });

  readonly urgentCommands: Counter = new Counter({
    name: 'reactor_urgent_commands_total',
    help: 'Urgent commands (issue 39) by outcome: restarted (a step in flight was superseded and made again), rate_limited (at most one restart a chunk: run as an ordinary command).',
    labelNames: ['outcome'],
    registers: [this.registry],
    collect: () => {
      const c = this.#snapshotCounters();
      this.#advance(this.urgentCommands, 'restarted', c?.urgentRestarts ?? 0, { outcome: 'restarted' });
      this.#advance(this.urgentCommands, 'rateLimited', c?.urgentRateLimited ?? 0, { outcome: 'rate_limited' });
    },
  });

  /** A counter read at scrape time from a cumulative count of the host. */
  #advance(counter: Counter, key: 'taken' | 'failed' | 'rewinds' | 'restarted' | 'rateLimited', now: number, labels?: Record<string, string>): void {
    const seen = this.#snapshotSeen[key];
    if (now > seen) {
      if (labels) counter.inc(labels, now - seen);
      else counter.inc(now - seen);
    }
    this.#snapshotSeen[key] = Math.max(seen, now);
  }

  /** The snapshot counters of a host (`AppHost.counters`), read at scrape time. */
  setSnapshotCounters(read: () => HostCounterView | undefined): void {
    this.#snapshotCounters = read;
  }

  // ---- where the time goes, load progress, GPU busy (issue 26, lane stages) ---------------------

  readonly stepStageSeconds = new Histogram({
    name: 'reactor_step_stage_seconds',
    help:
      "Where a step's time goes, by stage: process_input, generate (and inside it, for an app on a DistributedRunner, runner_dispatch, runner_ranks, runner_handback), " +
      "process_output; encode (once per frame, shared by clients); queue (a frame waiting in a client's outbound queue once encoded); send (a frame handed to the socket until written), seconds.",
    labelNames: ['stage'],
    buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
  });
  /** One child per stage, its labels resolved once (an observation costs no label lookup). */
  readonly stage = {
    processInput: this.stepStageSeconds.labels('process_input'),
    generate: this.stepStageSeconds.labels('generate'),
    runnerDispatch: this.stepStageSeconds.labels('runner_dispatch'),
    runnerRanks: this.stepStageSeconds.labels('runner_ranks'),
    runnerHandback: this.stepStageSeconds.labels('runner_handback'),
    processOutput: this.stepStageSeconds.labels('process_output'),
    encode: this.stepStageSeconds.labels('encode'),
    queue: this.stepStageSeconds.labels('queue'),
    send: this.stepStageSeconds.labels('send'),
  };
  #loadProgress: () => number | undefined = () => undefined;
  readonly loadProgressRatio: Gauge = new Gauge({
    name: 'reactor_load_progress_ratio',
    help: "How far the app's load is, 0..1 (what the app and its ranks report; 1 once loaded; absent when loading failed).",
    registers: [this.registry],
    collect: () => {
      const r = this.#loadProgress();
      this.loadProgressRatio.reset();
      if (r !== undefined) this.loadProgressRatio.set(r);
    },
  });
  #rankGpuBusy: () => readonly { rank: number; ratio: number }[] = () => [];
  readonly rankGpuBusyRatio: Gauge = new Gauge({
    name: 'reactor_rank_gpu_busy_ratio',
    help: "Each rank's GPU busy ratio, 0..1, where the rank knows it (Python ranks on CUDA: torch.cuda.utilization()); a rank that does not is absent.",
    labelNames: ['rank'],
    registers: [this.registry],
    collect: () => {
      this.rankGpuBusyRatio.reset();
      for (const g of this.#rankGpuBusy()) this.rankGpuBusyRatio.set({ rank: String(g.rank) }, g.ratio);
    },
  });

  /** Where `reactor_load_progress_ratio` and `reactor_rank_gpu_busy_ratio` are read from, at scrape time. */
  setLoadGauges(loadProgress: () => number | undefined, rankGpuBusy: () => readonly { rank: number; ratio: number }[]): void {
    this.#loadProgress = loadProgress;
    this.#rankGpuBusy = rankGpuBusy;
  }

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: 'reactor_process_' });
    for (const reason of ['slow_client', 'flush', 'disconnected', 'encode_error', 'server_budget', 'awaiting_key', 'encoder_busy'] satisfies DropReason[]) {
      this.framesDropped.inc({ reason }, 0);
      this.audioChunksDropped.inc({ reason }, 0);
    }
    for (const transport of ['websocket', 'webrtc']) {
      this.clientFreezes.inc({ transport }, 0);
      this.clientFreezeSeconds.inc({ transport }, 0);
      this.clientFramesDropped.inc({ transport }, 0);
    }
    for (const outcome of ['accepted', 'refused']) this.clientStatsReports.inc({ outcome }, 0);
  }
}
