import { describe, expect, it } from 'vitest';
import { StepPacer } from '../../src/session/step-pacer.js';

describe('StepPacer', () => {
  it('starts the first step at once, then leads by the mean step time, four deviations and a margin', () => {
    const p = new StepPacer();
    expect(p.lead()).toBe(Infinity);
    for (let i = 0; i < 200; i++) p.record(10, 0, true);
    // Steady 10 ms steps: the deviation decays to ~0 and the margin to its 2 ms floor.
    expect(p.lead()).toBeCloseTo(12, 1);
    expect(p.margin).toBe(2);
  });

  it('a jittery step time widens the lead', () => {
    const steady = new StepPacer();
    const jittery = new StepPacer();
    for (let i = 0; i < 100; i++) {
      steady.record(10, 0, true);
      jittery.record(i % 2 === 0 ? 2 : 18, 0, true);
    }
    expect(jittery.lead()).toBeGreaterThan(steady.lead() + 20); // mean 10 either way; deviation ~8 ms x 4
  });

  it('frames that came late after a held step grow the margin; late frames of a step that started at once do not', () => {
    const p = new StepPacer();
    p.record(5, 0, true);
    p.record(5, 7, false); // a slow model, not the pacer's doing
    expect(p.margin).toBe(2);
    p.record(5, 7, true);
    expect(p.margin).toBe(9);
    for (let i = 0; i < 500; i++) p.record(5, 0, true);
    expect(p.margin).toBe(2); // back to the floor while on time
    for (let i = 0; i < 100; i++) p.record(5, 50, true);
    expect(p.margin).toBe(200); // capped
  });
});
