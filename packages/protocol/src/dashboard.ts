/**
 * The live dashboard's wire types: the answer of `GET /dashboard/data`, which the server's
 * sampler (`@reactor/server`'s `dashboard/`) writes and the dashboard page (`@reactor/viewer`)
 * reads. Declared once, here (issue 36).
 */

/** Where a dashboard event came from. */
export type DashboardEventSource = 'log' | 'session' | 'clients';

/** One entry of the dashboard's ring of recent errors and warnings. */
export interface DashboardEvent {
  /** When it last happened (ms since the epoch). */
  t: number;
  /** When it first happened (ms since the epoch). */
  first: number;
  level: 'warn' | 'error';
  source: DashboardEventSource;
  /** The error code, where it has one. */
  code?: string;
  message: string;
  /** How many times it happened in a row (a repeat is counted, not listed again). */
  count: number;
}

/** One connected client, as the dashboard lists it. */
export interface DashboardClient {
  id: string;
  role: string;
  /** How its media travels: `websocket` (binary frames on its socket) or `webrtc`. */
  transport: 'websocket' | 'webrtc';
  /** `jpeg` until it selects a video codec. */
  codec: string;
  /** Its video tier (`-` for JPEG). */
  tier: string;
  framesSent: number;
  framesDropped: number;
  bufferedBytes: number;
  /** Seconds since the dashboard first saw it. */
  connectedS: number;
}

/** The answer of `GET /dashboard/data`. */
export interface DashboardData {
  intervalMs: number;
  historyS: number;
  /** Sample times, seconds since the epoch (ms precision), oldest first. */
  t: number[];
  /**
   * One array per series, aligned with `t` (`null`: nothing to show in that interval), keyed
   * `<chart>/<series>`: `fps/<track>`, `delivery/sent|dropped` (frames/s), `clients/connected`,
   * `step/mean|p99` (ms), `stage/<stage>` (mean ms), `c2p/p50|p99` (ms), `gpu/rank <n>` (%),
   * `viewer/freezes|dropped` (per second, as the viewers reported them).
   */
  series: Record<string, (number | null)[]>;
  /** Metrics the dashboard reads that this server does not have (their charts say "no data yet"). */
  absent: string[];
  now: {
    session: { state: string; clients: number; sessionId?: string; refused?: string };
    clients: DashboardClient[];
    /** `reactor_load_progress_ratio` (0..1), `null` when absent. */
    loadProgress: number | null;
    /** Time to first frame over the server's life, ms, `null` when absent or never observed. */
    firstFrameMs: { p50: number | null; p99: number | null; count: number } | null;
    /** Sampling cost, µs: the last sample, the median and the mean of those kept. */
    sampleCostUs: { last: number; p50: number; mean: number };
  };
  /** Recent errors and warnings, newest first. */
  events: DashboardEvent[];
}
