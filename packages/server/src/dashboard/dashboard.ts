/**
 * The live dashboard's data (`GET /dashboard/data`): once a second the server reads its
 * prom-client registry by metric name and keeps what each interval saw in a bounded ring (the
 * last {@link DASHBOARD_HISTORY} samples): frames per second per track, delivered and dropped
 * frames, clients, step time (mean and p99), the step's stages, command-to-pixel latency (p50,
 * p99), GPU busy per rank, the viewers' freezes and drops. A metric that is not registered (an
 * older app host, a feature off) reads as absent: its series are missing and its name is listed
 * in `absent`, and the page says "no data yet".
 */
import type { Registry } from 'prom-client';
import type { DashboardClient, DashboardData, SessionStatus } from '@reactor/protocol';
import type { DashboardEvents } from './dashboard-events.js';
import { bucketQuantile, counterDeltas, histogramDelta, labelOf, readHistogram, readScalar, type HistogramReading, type Reading } from './dashboard-metrics.js';

/** Samples kept: ten minutes at one a second. */
export const DASHBOARD_HISTORY = 600;
/** Time between samples, ms. */
export const DASHBOARD_INTERVAL_MS = 1000;

/** The metrics the dashboard reads, by what it shows. */
export const DASHBOARD_METRICS = {
  framesEmitted: 'reactor_frames_emitted_total',
  framesSent: 'reactor_frames_sent_total',
  framesDropped: 'reactor_frames_dropped_total',
  clients: 'reactor_clients',
  stepSeconds: 'reactor_step_duration_seconds',
  stageSeconds: 'reactor_step_stage_seconds',
  commandToPixel: 'reactor_command_to_pixel_seconds',
  firstFrame: 'reactor_time_to_first_frame_seconds',
  freezes: 'reactor_client_freezes_total',
  clientDropped: 'reactor_client_frames_dropped_total',
  gpuBusy: 'reactor_rank_gpu_busy_ratio',
  loadProgress: 'reactor_load_progress_ratio',
  commandResults: 'reactor_command_results_total',
  rejected: 'reactor_connections_rejected_total',
} as const;

/** What the sampler reads besides the registry. */
export interface DashboardSources {
  registry: Registry;
  events: DashboardEvents;
  /** The connected clients, without `connectedS` (the sampler adds it). */
  clients(): Omit<DashboardClient, 'connectedS'>[];
  status(): SessionStatus;
}

interface Sample {
  t: number;
  values: Map<string, number>;
}

interface Previous {
  at: number;
  scalars: Map<string, Reading | undefined>;
  histograms: Map<string, HistogramReading | undefined>;
}

const ms = (s: number | null): number | null => (s === null ? null : Math.round(s * 1e6) / 1e3);
const round = (x: number, digits = 3): number => Math.round(x * 10 ** digits) / 10 ** digits;

/** The ring of samples and what reads them. */
export class DashboardSampler {
  readonly #src: DashboardSources;
  readonly #ring: Sample[] = [];
  readonly #costs: number[] = [];
  readonly #firstSeen = new Map<string, number>();
  #prev: Previous | undefined;
  #timer: ReturnType<typeof setInterval> | undefined;
  #busy = false;
  #lastStatus: { error?: string; refused?: string } = {};

  constructor(sources: DashboardSources) {
    this.#src = sources;
  }

  /** Samples once a second until {@link stop}. */
  start(): void {
    if (this.#timer) return;
    void this.sample();
    this.#timer = setInterval(() => void this.sample(), DASHBOARD_INTERVAL_MS);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** Records the session's errors and refusals as they change (the server's status listener calls it). */
  status(s: SessionStatus): void {
    const error = s.error ? `${s.error.code}: ${s.error.message}` : undefined;
    if (s.error && error !== this.#lastStatus.error) this.#src.events.add('error', 'session', s.error.message, s.error.code);
    if (s.refused !== undefined && s.refused !== this.#lastStatus.refused) this.#src.events.add('warn', 'session', `the app is not stepping: ${s.refused}`);
    this.#lastStatus = { ...(error !== undefined ? { error } : {}), ...(s.refused !== undefined ? { refused: s.refused } : {}) };
  }

  /** Takes one sample now (the timer's work; tests and benchmarks call it directly). */
  async sample(): Promise<void> {
    if (this.#busy) return;
    this.#busy = true;
    const started = performance.now();
    try {
      await this.#sample();
    } finally {
      this.#busy = false;
      this.#costs.push((performance.now() - started) * 1000);
      if (this.#costs.length > DASHBOARD_HISTORY) this.#costs.shift();
    }
  }

  async #sample(): Promise<void> {
    const reg = this.#src.registry;
    const M = DASHBOARD_METRICS;
    const at = performance.now();
    const scalars = new Map<string, Reading | undefined>();
    for (const name of [M.framesEmitted, M.framesSent, M.framesDropped, M.clients, M.freezes, M.clientDropped, M.gpuBusy, M.commandResults, M.rejected]) {
      scalars.set(name, await readScalar(reg, name));
    }
    const histograms = new Map<string, HistogramReading | undefined>();
    for (const name of [M.stepSeconds, M.stageSeconds, M.commandToPixel]) histograms.set(name, await readHistogram(reg, name));
    const prev = this.#prev;
    this.#prev = { at, scalars, histograms };
    if (!prev) return; // the first reading is the baseline of the rates
    const seconds = Math.max(0.001, (at - prev.at) / 1000);
    const values = new Map<string, number>();
    const rate = (name: string, each: (key: string, perS: number) => void): void => {
      const now = scalars.get(name);
      if (now) for (const [k, d] of counterDeltas(now, prev.scalars.get(name))) each(k, d / seconds);
    };
    rate(M.framesEmitted, (k, v) => values.set(`fps/${labelOf(k, 'track') ?? 'all'}`, round(v, 1)));
    const sum = (name: string): number | undefined => {
      const now = scalars.get(name);
      if (!now) return undefined;
      let total = 0;
      for (const d of counterDeltas(now, prev.scalars.get(name)).values()) total += d;
      return total / seconds;
    };
    const sent = sum(M.framesSent);
    if (sent !== undefined) values.set('delivery/sent', round(sent, 1));
    const dropped = sum(M.framesDropped);
    if (dropped !== undefined) values.set('delivery/dropped', round(dropped, 1));
    const clients = scalars.get(M.clients)?.get('');
    if (clients !== undefined) values.set('clients/connected', clients);
    const freezes = sum(M.freezes);
    if (freezes !== undefined) values.set('viewer/freezes', round(freezes, 2));
    const viewerDropped = sum(M.clientDropped);
    if (viewerDropped !== undefined) values.set('viewer/dropped', round(viewerDropped, 1));
    for (const [k, v] of scalars.get(M.gpuBusy) ?? []) values.set(`gpu/rank ${labelOf(k, 'rank') ?? '?'}`, round(v * 100, 1));

    const step = histograms.get(M.stepSeconds);
    if (step) {
      const d = histogramDelta(step, prev.histograms.get(M.stepSeconds));
      if (d.count > 0) {
        values.set('step/mean', ms(d.sum / d.count)!);
        values.set('step/p99', ms(bucketQuantile(step.bounds, d.buckets, 0.99))!);
      }
    }
    const stages = histograms.get(M.stageSeconds);
    if (stages) {
      for (const stage of new Set([...stages.series.keys()].map((k) => labelOf(k, 'stage') ?? '?'))) {
        const d = histogramDelta(stages, prev.histograms.get(M.stageSeconds), (k) => (labelOf(k, 'stage') ?? '?') === stage);
        if (d.count > 0) values.set(`stage/${stage}`, ms(d.sum / d.count)!);
      }
    }
    const c2p = histograms.get(M.commandToPixel);
    if (c2p) {
      const d = histogramDelta(c2p, prev.histograms.get(M.commandToPixel));
      if (d.count > 0) {
        values.set('c2p/p50', ms(bucketQuantile(c2p.bounds, d.buckets, 0.5))!);
        values.set('c2p/p99', ms(bucketQuantile(c2p.bounds, d.buckets, 0.99))!);
      }
    }
    this.#clientEvents(scalars.get(M.commandResults), prev.scalars.get(M.commandResults), scalars.get(M.rejected), prev.scalars.get(M.rejected));
    this.#clients(); // keeps each client's first-seen time, whether or not a page asks
    this.#ring.push({ t: Date.now() / 1000, values }); // whole ms: `t` as answered is the same number, so `?since=` never repeats a sample
    if (this.#ring.length > DASHBOARD_HISTORY) this.#ring.shift();
  }

  /** The error answers sent and the connections refused since the last sample, by code. */
  #clientEvents(results: Reading | undefined, resultsBefore: Reading | undefined, rejected: Reading | undefined, rejectedBefore: Reading | undefined): void {
    for (const [k, n] of results ? counterDeltas(results, resultsBefore) : []) {
      const code = labelOf(k, 'code');
      if (n > 0 && code !== undefined && code !== 'ok') this.#src.events.add('warn', 'clients', `error answer${n === 1 ? '' : 's'} sent to clients`, code, n);
    }
    for (const [k, n] of rejected ? counterDeltas(rejected, rejectedBefore) : []) {
      const reason = labelOf(k, 'reason');
      if (n > 0 && reason !== undefined) this.#src.events.add('warn', 'clients', `connection${n === 1 ? '' : 's'} refused or dropped`, reason, n);
    }
  }

  /** Samples kept now. */
  get size(): number {
    return this.#ring.length;
  }

  /**
   * The data of `GET /dashboard/data`: every sample kept, or those after `since` (seconds since
   * the epoch, the last `t` the page has), with every series any of them has.
   */
  async data(since?: number): Promise<DashboardData> {
    const samples = since === undefined ? this.#ring : this.#ring.filter((s) => s.t > since);
    const keys = new Set<string>();
    for (const s of samples) for (const k of s.values.keys()) keys.add(k);
    const series: Record<string, (number | null)[]> = {};
    for (const k of [...keys].sort()) series[k] = samples.map((s) => s.values.get(k) ?? null);
    const reg = this.#src.registry;
    const absent = Object.values(DASHBOARD_METRICS).filter((name) => reg.getSingleMetric(name) === undefined);
    const s = this.#src.status();
    const session: DashboardData['now']['session'] = { state: s.state, clients: s.clients };
    if (s.sessionId !== undefined) session.sessionId = s.sessionId;
    if (s.refused !== undefined) session.refused = s.refused;
    const progress = await readScalar(reg, DASHBOARD_METRICS.loadProgress);
    const first = await readHistogram(reg, DASHBOARD_METRICS.firstFrame);
    let firstFrameMs: DashboardData['now']['firstFrameMs'] = null;
    if (first) {
      const all = histogramDelta(first, undefined);
      firstFrameMs = { p50: ms(bucketQuantile(first.bounds, all.buckets, 0.5)), p99: ms(bucketQuantile(first.bounds, all.buckets, 0.99)), count: all.count };
    }
    const costs = this.#costs;
    return {
      intervalMs: DASHBOARD_INTERVAL_MS,
      historyS: (DASHBOARD_HISTORY * DASHBOARD_INTERVAL_MS) / 1000,
      t: samples.map((x) => x.t),
      series,
      absent,
      now: {
        session,
        clients: this.#clients(),
        loadProgress: progress?.get('') ?? null,
        firstFrameMs,
        sampleCostUs: {
          last: round(costs[costs.length - 1] ?? 0, 1),
          p50: round([...costs].sort((a, b) => a - b)[Math.floor(costs.length / 2)] ?? 0, 1),
          mean: round(costs.reduce((a, b) => a + b, 0) / Math.max(1, costs.length), 1),
        },
      },
      events: this.#src.events.list(),
    };
  }

  #clients(): DashboardClient[] {
    const now = Date.now();
    const seen = new Set<string>();
    const out = this.#src.clients().map((c) => {
      seen.add(c.id);
      let first = this.#firstSeen.get(c.id);
      if (first === undefined) this.#firstSeen.set(c.id, (first = now));
      return { ...c, connectedS: Math.round((now - first) / 1000) };
    });
    for (const id of this.#firstSeen.keys()) if (!seen.has(id)) this.#firstSeen.delete(id);
    return out;
  }
}
