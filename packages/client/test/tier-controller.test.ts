import { describe, expect, it } from 'vitest';
import { TierController, type TierDecision, type VideoTierSchema } from '../src/index.js';

const TIERS: VideoTierSchema[] = [
  { name: 'full', scale: 1, bitrate: 3_000_000 },
  { name: 'half', scale: 0.5, bitrate: 1_000_000 },
  { name: 'low', scale: 0.5, bitrate: 300_000 },
];

/**
 * A simulated link: the server plays 30 fps; `capacity(tier, t)` says which share of the frames
 * of that tier arrive (the rest the server drops for this client) and how late.
 */
function simulate(
  ctl: TierController,
  seconds: number,
  link: (tier: string, t: number) => { share: number; lateMs?: number },
): { decisions: (TierDecision & { at: number })[]; tiers: string[] } {
  const decisions: (TierDecision & { at: number })[] = [];
  const tiers: string[] = [];
  let dropped = 0;
  let owed = 0;
  for (let frame = 0; frame < seconds * 30; frame++) {
    const t = frame * (1000 / 30);
    clockNow = t;
    const { share, lateMs = 0 } = link(ctl.tier, t);
    owed += share;
    if (owed >= 1) {
      owed -= 1;
      ctl.frame(12_000, t + 5 + lateMs, t);
    } else dropped++;
    if (frame % 10 === 0) ctl.stats({ fps: 30, dropped });
    if (frame % 8 === 0) {
      const d = ctl.tick(t);
      if (d) {
        decisions.push({ ...d, at: Math.round(t / 100) / 10 });
        // the server confirms at once
        ctl.setTier(d.tier);
      }
    }
    tiers.push(ctl.tier);
  }
  return { decisions, tiers };
}
let clockNow = 0;
const now = (): number => clockNow;

describe('TierController', () => {
  it('stays on the top tier while every frame arrives on time', () => {
    clockNow = 0;
    const ctl = new TierController(TIERS, undefined, { now });
    const { decisions } = simulate(ctl, 60, () => ({ share: 1 }));
    expect(decisions).toEqual([]);
    expect(ctl.tier).toBe('full');
    expect(ctl.lastWindow).toMatchObject({ verdict: 'good', loss: 0 });
    expect(ctl.lastWindow!.bitrate).toBeGreaterThan(2_500_000);
  });

  it('moves down one tier within 3 s of sustained loss, and to the lowest when that is not enough', () => {
    clockNow = 0;
    const ctl = new TierController(TIERS, undefined, { now });
    // From 10 s on, full loses 15% of its frames and half 15% too; low gets everything.
    const { decisions } = simulate(ctl, 20, (tier, t) => ({ share: t < 10_000 || tier === 'low' ? 1 : 0.85 }));
    expect(decisions.map((d) => `${d.from}->${d.tier}`)).toEqual(['full->half', 'half->low']);
    expect(decisions[0]!.at).toBeGreaterThan(10);
    expect(decisions[0]!.at).toBeLessThanOrEqual(13);
    expect(decisions[0]!.reason).toMatch(/^1\d% of frames lost \(2 bad windows in a row\)$/);
    // settle (2 s) + 2 bad windows after the first move
    expect(decisions[1]!.at - decisions[0]!.at).toBeLessThanOrEqual(5);
  });

  it('moves down after one window when the loss is severe', () => {
    clockNow = 0;
    const ctl = new TierController(TIERS, undefined, { now });
    const { decisions } = simulate(ctl, 8, (tier, t) => ({ share: t < 4000 || tier !== 'full' ? 1 : 0.4 }));
    expect(decisions.map((d) => d.tier)).toEqual(['half']);
    expect(decisions[0]!.at).toBeLessThanOrEqual(5.5);
  });

  it('does not move for one bad window', () => {
    clockNow = 0;
    const ctl = new TierController(TIERS, undefined, { now });
    const { decisions } = simulate(ctl, 20, (_tier, t) => ({ share: t >= 5000 && t < 6000 ? 0.8 : 1 }));
    expect(decisions).toEqual([]);
  });

  it('moves down when frames arrive later and later (the link queues), with no frame lost', () => {
    clockNow = 0;
    const ctl = new TierController(TIERS, undefined, { now });
    // On full, from 5 s on, each second adds 300 ms of queueing delay.
    const { decisions } = simulate(ctl, 15, (tier, t) => ({ share: 1, lateMs: tier === 'full' && t > 5000 ? (t - 5000) * 0.3 : 0 }));
    expect(decisions.map((d) => d.tier)).toEqual(['half']);
    expect(decisions[0]!.reason).toMatch(/frames \d+ ms late/);
  });

  it('moves up one tier only after upAfterMs of stable reception', () => {
    clockNow = 0;
    const ctl = new TierController(TIERS, 'low', { now });
    const { decisions } = simulate(ctl, 40, () => ({ share: 1 }));
    expect(decisions.map((d) => `${d.from}->${d.tier}`)).toEqual(['low->half', 'half->full']);
    // 10 s stable after the 2 s settle (the first judged window counts from its start), twice
    expect(decisions[0]!.at).toBeGreaterThanOrEqual(11);
    expect(decisions[1]!.at - decisions[0]!.at).toBeGreaterThanOrEqual(11);
    expect(decisions[0]!.reason).toMatch(/^stable for 1\d s$/);
  });

  it('never flaps: a link that carries only the middle tier gets ever longer holds before each new try of the top', () => {
    clockNow = 0;
    const ctl = new TierController(TIERS, 'half', { now });
    const { decisions } = simulate(ctl, 300, (tier) => ({ share: tier === 'full' ? 0.5 : 1 }));
    const ups = decisions.filter((d) => d.direction === 'up').map((d) => d.at);
    const downs = decisions.filter((d) => d.direction === 'down');
    expect(downs.every((d) => d.from === 'full' && d.tier === 'half')).toBe(true);
    // tries at ~12 s, then holds of 20, 40, 80, 120 (the cap) s after each fall back
    expect(ups.length).toBeGreaterThanOrEqual(3);
    expect(ups.length).toBeLessThanOrEqual(5);
    const gaps = ups.slice(1).map((u, i) => u - ups[i]!);
    for (let i = 1; i < gaps.length; i++) expect(gaps[i]!).toBeGreaterThan(gaps[i - 1]!);
    expect(ctl.upHoldMs('full')).toBeGreaterThanOrEqual(80_000);
    expect(ctl.tier).toBe('half');
  });

  it('judges nothing while no frame arrives and the server plays none (a paused stream)', () => {
    clockNow = 0;
    const ctl = new TierController(TIERS, undefined, { now });
    ctl.stats({ fps: 0, dropped: 0 });
    for (let t = 0; t <= 30_000; t += 250) expect(ctl.tick(t)).toBeUndefined();
    expect(ctl.lastWindow?.verdict).toBe('none');
  });

  it('stays on the top tier for a model slower than real time: bursts of 8 frames with 1 s gaps, nothing dropped (stats.fps as the server measures it, or the app fps)', () => {
    for (const reportedFps of [6, 24]) {
      clockNow = 0;
      const ctl = new TierController(TIERS, undefined, { now });
      const decisions: TierDecision[] = [];
      // Each step: 8 frames played at 24 fps (333 ms), then the next step takes another second.
      for (let t = 0, step = 0; t < 30_000; step++) {
        for (let i = 0; i < 8; i++, t += 1000 / 24) ctl.frame(12_000, t + 5, t);
        t += 1000;
        ctl.stats({ fps: reportedFps, dropped: 0 });
        for (let tick = t - 1333; tick <= t; tick += 250) {
          clockNow = tick;
          const d = ctl.tick(tick);
          if (d) decisions.push(d);
        }
      }
      expect(decisions, `stats.fps ${reportedFps}`).toEqual([]);
      expect(ctl.tier).toBe('full');
    }
  });

  it('checks its arguments, naming the option', () => {
    expect(() => new TierController([])).toThrowErrorMatchingInlineSnapshot(`[RangeError: tiers must name at least one tier (welcome.video.tiers)]`);
    expect(() => new TierController(TIERS, 'tiny')).toThrowErrorMatchingInlineSnapshot(
      `[RangeError: initialTier "tiny" is not one of the tiers: full, half, low]`,
    );
    expect(() => new TierController(TIERS, undefined, { windowMs: 0 })).toThrowErrorMatchingInlineSnapshot(`[RangeError: options.windowMs must be > 0, got 0]`);
    expect(() => new TierController(TIERS, undefined, { lossRatio: -0.1 })).toThrowErrorMatchingInlineSnapshot(
      `[RangeError: options.lossRatio must be a finite number >= 0, got -0.1]`,
    );
  });
});
