/**
 * Feeds a client's {@link LatencyTracker} from its events and sends what it measured as
 * `client_stats`, at most once per `welcome.clientStats.intervalMs` (and never to a server whose
 * welcome lacks it). In `delivery` mode a frame counts as presented when the client hands it to
 * the app (its `frame` event: what a Node client can know); in `manual` mode the code that draws
 * calls `tracker.presented()` itself (the viewer: when its canvas draws the frame).
 */
import type { PresentationMode, ReactorClientEvents } from './client-types.js';
import type { LatencyTracker } from './latency/latency-tracker.js';
import type { ClientStatsMessage } from './base/protocol.js';

/** What the reporter needs of its client. */
export interface ReporterClient {
  on<K extends keyof ReactorClientEvents>(type: K, listener: (value: ReactorClientEvents[K]) => void): () => void;
}

/** Subscribes `tracker` to `client`'s events and reports; returns a function that stops both. */
export function startLatencyReports(
  client: ReporterClient,
  tracker: LatencyTracker,
  mode: PresentationMode,
  send: (msg: ClientStatsMessage) => void,
): () => void {
  let timer: ReturnType<typeof setInterval> | undefined;
  let intervalMs = 0;
  const report = (): void => {
    const msg = tracker.takeReport();
    if (msg) send(msg);
  };
  const schedule = (ms: number): void => {
    if (timer !== undefined && ms === intervalMs) return;
    if (timer !== undefined) clearInterval(timer);
    timer = undefined;
    intervalMs = ms;
    if (ms <= 0) return;
    timer = setInterval(report, ms);
    // Node: the reports must not keep a process alive that has nothing else to do.
    (timer as { unref?: () => void }).unref?.();
  };
  const offs = [
    client.on('welcome', (w) => {
      tracker.welcome();
      // Before the socket's first report: what the previous connection measured is not this one's to report.
      schedule(w.clientStats ? Math.max(1000, w.clientStats.intervalMs) : 0);
    }),
    client.on('session', (s) => tracker.setStreaming(s.state === 'streaming' && s.refused === undefined)),
    client.on('flush', () => tracker.flushed()),
    client.on('status', (s) => {
      if (s.state === 'closed') schedule(0);
    }),
  ];
  if (mode === 'delivery') offs.push(client.on('frame', (f) => tracker.presented(f.trackName, f.seq, f.receivedAt)));
  return () => {
    schedule(0);
    for (const off of offs) off();
  };
}
