/**
 * What the viewer's user sees, measured where the viewer shows it: the canvas calls
 * {@link framePresented} when it has drawn a frame (JPEG, raw or decoded video) and
 * {@link framesDropped} for frames it never draws; the client's {@link LatencyTracker} turns that
 * into command-to-pixel samples, time to first frame and freezes, and reports them to the server
 * (`client_stats`). The status line under the stream shows them (`startLatencyOverlay`).
 */
import type { ReactorClient } from '@reactor/client';
import { $ } from './dom.js';
import { viewer } from './hooks.js';

/** The connect options that make the client wait for the canvas to say a frame was presented. */
export const LATENCY_OPTIONS = { stats: { presentation: 'manual' } } as const;

/** A frame of `track` was drawn on the canvas now (`seq` undefined: a WebRTC frame, which carries no session seq but its RTP timestamp). */
export function framePresented(track: string, seq: number | undefined, rtpTimestamp?: number): void {
  viewer.client?.latency?.presented(track, seq, undefined, rtpTimestamp);
}

/** Frames received and never drawn (a newer one replaced them, or they could not be decoded). */
export function framesDropped(count = 1): void {
  if (count > 0) viewer.client?.latency?.dropped(count);
}

const decoderLosses = new Map<string, number>();

/**
 * The coded-video decoder of `track` counts what it discarded and failed on; what it added since
 * the last call is dropped (its counters only grow while one decoder lives, so a smaller count
 * is a new decoder).
 */
export function decoderCounters(track: string, counters: { discarded: number; errors: number } | undefined): void {
  if (!counters) return;
  const lost = counters.discarded + counters.errors;
  const before = decoderLosses.get(track) ?? 0;
  decoderLosses.set(track, lost);
  framesDropped(lost >= before ? lost - before : lost);
}

function ms(v: number | undefined): string {
  return v === undefined ? '-' : v < 1000 ? `${Math.round(v)} ms` : `${(v / 1000).toFixed(2)} s`;
}

/** Fills the latency line of the status overlay from the client's tracker, twice a second. */
export function startLatencyOverlay(client: ReactorClient): void {
  const tracker = client.latency;
  if (!tracker) return;
  const show = (): void => {
    const s = tracker.summary();
    $('c2p-p50').textContent = ms(s.p50Ms);
    $('c2p-last').textContent = ms(s.lastMs);
    $('c2p-samples').textContent = String(s.samples);
    $('first-frame').textContent = ms(s.firstFrameMs);
    $('freezes').textContent = s.freezes === 0 ? '0' : `${s.freezes} (${ms(s.freezeMs)})`;
  };
  show();
  setInterval(show, 500);
}
