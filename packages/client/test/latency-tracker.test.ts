import { describe, expect, it } from 'vitest';
import { parseClientMessage } from '@reactor/protocol';
import { LatencyTracker } from '../src/index.js';

/** A tracker on a clock the test moves. */
function tracker(): { t: LatencyTracker; at: (ms: number) => void } {
  let now = 0;
  const t = new LatencyTracker({ now: () => now });
  return { t, at: (ms) => (now = ms) };
}

describe('LatencyTracker', () => {
  it('measures send -> presentation of the applied frame, or of the first later frame of its track', () => {
    const { t, at } = tracker();
    t.connecting();
    t.welcome();
    at(10);
    t.applied('set_speed', 0, { outcome: 'applied', seq: 5, track: 'main' });
    t.presented('main', 4, 20); // before the applied frame: no sample
    t.presented('other', 5, 25); // another track's frame of that seq: no sample
    expect(t.summary().samples).toBe(0);
    t.presented('main', 7, 40); // frame 5 was dropped: 7 is the first picture that shows it
    at(1000);
    const r = t.takeReport()!;
    expect(r.samples).toEqual([{ command: 'set_speed', ms: 40 }]);
    expect(r.firstFrameMs).toBe(20);
    expect(t.summary()).toMatchObject({ p50Ms: 40, lastMs: 40, samples: 1, firstFrameMs: 20 });
  });

  it('takes the sample at once when the frame was presented before its acknowledgement arrived', () => {
    const { t } = tracker();
    t.presented('main', 10, 30);
    t.presented('main', 11, 63);
    t.applied('set_color', 5, { outcome: 'applied', seq: 11, track: 'main' });
    expect(t.takeReport()!.samples).toEqual([{ command: 'set_color', ms: 58 }]);
  });

  it('pairs a WebRTC frame with its applied message by RTP timestamp (wrapping at 32 bits), before or after the acknowledgement', () => {
    const { t } = tracker();
    const near = 0xffff_ff00; // just before the wrap
    t.applied('set_speed', 0, { outcome: 'applied', seq: 9, track: 'main', rtpTimestamp: near + 3000 - 0x1_0000_0000 });
    t.presented('main', undefined, 10, near); // earlier than the applied frame: no sample
    t.presented('main', undefined, 20); // no timestamp: no sample either
    t.presented('main', undefined, 45, near + 6000 - 0x1_0000_0000); // after the wrap, later than the applied one: it shows it
    t.presented('main', undefined, 60, near + 9000 - 0x1_0000_0000);
    // Presented before its acknowledgement arrived: taken at once from the history.
    t.applied('set_color', 30, { outcome: 'applied', seq: 10, track: 'main', rtpTimestamp: near + 9000 - 0x1_0000_0000 });
    // An applied message without a timestamp (no peer when the server sent it) is not paired with WebRTC frames.
    t.applied('set_label', 30, { outcome: 'applied', seq: 11, track: 'main' });
    t.presented('main', undefined, 90, near + 12000 - 0x1_0000_0000);
    expect(t.takeReport()!.samples).toEqual([
      { command: 'set_speed', ms: 45 },
      { command: 'set_color', ms: 30 },
    ]);
  });

  it('takes no sample of a command that never reaches a frame', () => {
    const { t } = tracker();
    for (const outcome of ['superseded', 'paused', 'ended']) t.applied('set_speed', 0, { outcome });
    t.presented('main', 1, 10);
    expect(t.takeReport()).toBeUndefined();
  });

  it('counts gaps over 200 ms as freezes only while streaming and not paused, and not across a flush', () => {
    const { t } = tracker();
    t.presented('main', 1, 0);
    t.presented('main', 2, 150); // 150 ms: no freeze
    t.presented('main', 3, 500); // 350 ms: a freeze
    t.setStreaming(false);
    t.presented('main', 4, 2000);
    t.setStreaming(true);
    t.presented('main', 5, 3000); // the gap began while not streaming
    t.setTrackPaused('main', true);
    t.presented('main', 6, 4000);
    t.setTrackPaused('main', false);
    t.presented('main', 7, 5000); // across the pause
    t.flushed();
    t.presented('main', 8, 6000); // across a flush
    t.presented('main', 9, 6250); // 250 ms: a freeze
    const r = t.takeReport()!;
    expect({ freezes: r.freezes, freezeMs: r.freezeMs }).toEqual({ freezes: 2, freezeMs: 600 });
    expect(t.takeReport()).toBeUndefined();
  });

  it('reports at most 64 samples at once, drops nothing reported twice, and makes reports the server parses', () => {
    const { t, at } = tracker();
    t.connecting();
    t.presented('main', 0, 5);
    for (let i = 1; i <= 70; i++) {
      t.applied('set_speed', i, { outcome: 'applied', seq: i, track: 'main' });
      t.presented('main', i, i + 30);
    }
    t.dropped(3);
    at(2000);
    const first = t.takeReport()!;
    expect(first.samples).toHaveLength(64);
    expect(first).toMatchObject({ type: 'client_stats', transport: 'websocket', dropped: 3, firstFrameMs: 5, fps: 35.5 });
    expect(parseClientMessage(JSON.stringify(first))).toEqual({ ok: true, message: first });
    const second = t.takeReport()!;
    expect(second.samples).toHaveLength(6);
    expect(second.firstFrameMs).toBeUndefined();
    expect(second.dropped).toBe(0);
    expect(t.takeReport()).toBeUndefined();
    expect(t.summary()).toMatchObject({ samples: 70, p50Ms: 30, dropped: 3 });
  });

  it('forgets on a welcome what the previous connection has not reported and what waits for a frame', () => {
    const { t } = tracker();
    t.applied('set_speed', 0, { outcome: 'applied', seq: 3, track: 'main' });
    t.presented('main', 3, 40);
    t.applied('set_speed', 50, { outcome: 'applied', seq: 9, track: 'main' });
    t.connecting(100);
    t.welcome();
    t.presented('main', 9, 130);
    const r = t.takeReport()!;
    expect(r.samples).toEqual([]);
    expect(r.firstFrameMs).toBe(30);
  });

  it('drops a sample longer than the protocol allows', () => {
    const { t } = tracker();
    t.applied('set_speed', 0, { outcome: 'applied', seq: 1, track: 'main' });
    t.presented('main', 1, 130_000);
    expect(t.takeReport()?.samples ?? []).toEqual([]);
  });
});
