/**
 * The video model's soundtrack: a few sine partials whose pitches and loudness come from the
 * prompt code (the same per-frame code that conditions the picture, prompt transitions
 * included), rendered on rank 0 frame by frame. Each partial keeps its phase from one frame to
 * the next (and from one chunk to the next), and its loudness ramps linearly across a frame,
 * so the sound has no clicks when the prompt, and with it the chord, changes.
 */

/** Sine partials in the mix. */
export const SOUNDTRACK_PARTIALS = 4;
/** A major pentatonic scale, semitones above the root: any two of its notes sound well together. */
const PENTATONIC = [0, 2, 4, 7, 9] as const;
/** The root note (A2), Hz. */
const ROOT_HZ = 110;
/** Peak amplitude of one partial (of 1): four of them never clip. */
const PARTIAL_AMP = 0.12;

/** One partial's pitch and loudness. */
export interface Partial {
  /** Hz. */
  freq: number;
  /** Peak amplitude, 0..{@link PARTIAL_AMP}. */
  amp: number;
}

/**
 * The partials a prompt code asks for. Code entry `k` (in −1..1) picks partial `k`'s note
 * among two octaves of the pentatonic scale (the upper two partials an octave higher than the
 * lower two); entry `k + 4` its loudness.
 */
export function soundtrackPartials(code: Float64Array): Partial[] {
  const out: Partial[] = [];
  for (let k = 0; k < SOUNDTRACK_PARTIALS; k++) {
    const x = ((code[k % code.length] as number) + 1) / 2;
    const step = Math.min(9, Math.max(0, Math.floor(x * 10)));
    const semitones = 12 * Math.floor(step / 5) + (PENTATONIC[step % 5] as number) + (k >= 2 ? 12 : 0);
    const loud = ((code[(k + 4) % code.length] as number) + 1) / 2;
    out.push({ freq: ROOT_HZ * 2 ** (semitones / 12), amp: PARTIAL_AMP * (0.35 + 0.65 * Math.min(1, Math.max(0, loud))) });
  }
  return out;
}

/** A {@link Soundtrack}'s state between frames. */
export interface SoundtrackSnapshot {
  phase: Float64Array;
  amp: Float64Array | null;
}

/** Renders the soundtrack frame by frame, keeping each partial's phase and loudness between calls. */
export class Soundtrack {
  private readonly phase = new Float64Array(SOUNDTRACK_PARTIALS);
  private amp: Float64Array | null = null;

  /**
   * @param sampleRate     samples per second
   * @param samplesPerFrame samples of one video frame (`sampleRate · timeStep`)
   */
  constructor(
    readonly sampleRate: number,
    readonly samplesPerFrame: number,
  ) {}

  /** Writes one frame of sound for prompt code `code` into `out` at `offset` (`samplesPerFrame` samples). */
  renderFrame(code: Float64Array, out: Int16Array, offset: number): void {
    const parts = soundtrackPartials(code);
    const from = this.amp ?? Float64Array.from(parts, (p) => p.amp);
    const n = this.samplesPerFrame;
    const mix = new Float64Array(n);
    parts.forEach((p, k) => {
      const step = (2 * Math.PI * p.freq) / this.sampleRate;
      const a0 = from[k] as number;
      const da = (p.amp - a0) / n;
      let phase = this.phase[k] as number;
      for (let i = 0; i < n; i++) {
        mix[i] = (mix[i] as number) + (a0 + da * i) * Math.sin(phase);
        phase += step;
      }
      // Kept in [0, 2π) so a long rollout loses no precision.
      this.phase[k] = phase % (2 * Math.PI);
    });
    for (let i = 0; i < n; i++) out[offset + i] = Math.round((mix[i] as number) * 32767);
    this.amp = Float64Array.from(parts, (p) => p.amp);
  }

  /** Its state between frames (phases and loudness), copied: what a session snapshot keeps. */
  snapshot(): SoundtrackSnapshot {
    return { phase: this.phase.slice(), amp: this.amp?.slice() ?? null };
  }

  /** Puts {@link snapshot}'s state back (copied: the caller's arrays stay its own). */
  restore(s: SoundtrackSnapshot): void {
    if (s.phase.length !== this.phase.length || (s.amp !== null && s.amp.length !== this.phase.length)) {
      throw new RangeError(`a soundtrack snapshot has ${s.phase.length} partials, this soundtrack ${this.phase.length}`);
    }
    this.phase.set(s.phase);
    this.amp = s.amp === null ? null : Float64Array.from(s.amp);
  }

  /** A new rollout: phases back to 0, no loudness ramp from the old sound. */
  reset(): void {
    this.phase.fill(0);
    this.amp = null;
  }
}
