/**
 * AudioWorklet processors of the SDK, loaded with `audioWorklet.addModule()` (never imported):
 * `reactor-pcm-capture` turns a microphone into mono s16 chunks at a target rate, and
 * `reactor-pcm-player` plays s16 chunks through a small jitter buffer. Self-contained: a worklet
 * scope has no DOM and no other module of this package.
 */

// The AudioWorkletGlobalScope's names (not in TypeScript's DOM library).
declare const sampleRate: number;
declare function registerProcessor(name: string, ctor: new (options: { processorOptions?: any }) => WorkletProcessor): void;
interface WorkletProcessor {
  readonly port: MessagePort;
  process(inputs: Float32Array[][], outputs: Float32Array[][]): boolean;
}
declare const AudioWorkletProcessor: new () => { readonly port: MessagePort };

/** Mixes its input down to mono, resamples linearly to `targetRate`, and posts `Int16Array`s of `chunkSamples`. */
class PcmCapture extends AudioWorkletProcessor implements WorkletProcessor {
  readonly #step: number;
  readonly #chunk: number;
  #buf: Int16Array;
  #fill = 0;
  /** Position of the next output sample, in input samples from the start of the current block. */
  #pos = 0;
  #last = 0;

  constructor(options: { processorOptions?: { targetRate: number; chunkSamples: number } }) {
    super();
    const o = options.processorOptions!;
    this.#step = sampleRate / o.targetRate;
    this.#chunk = o.chunkSamples;
    this.#buf = new Int16Array(this.#chunk);
  }

  process(inputs: Float32Array[][]): boolean {
    const channels = inputs[0];
    if (!channels || channels.length === 0) return true;
    const n = channels[0]!.length;
    const mono = new Float32Array(n);
    for (const ch of channels) for (let i = 0; i < n; i++) mono[i]! += ch[i]! / channels.length;
    // Linear interpolation; index -1 is the previous block's last sample.
    const at = (k: number): number => (k < 0 ? this.#last : mono[k]!);
    while (this.#pos <= n - 1) {
      const i = Math.floor(this.#pos);
      const frac = this.#pos - i;
      const v = frac === 0 ? at(i) : at(i) + (at(i + 1) - at(i)) * frac;
      const s = Math.max(-1, Math.min(1, v));
      this.#buf[this.#fill++] = s < 0 ? s * 0x8000 : s * 0x7fff;
      if (this.#fill === this.#chunk) {
        this.port.postMessage(this.#buf, [this.#buf.buffer]);
        this.#buf = new Int16Array(this.#chunk);
        this.#fill = 0;
      }
      this.#pos += this.#step;
    }
    this.#pos -= n;
    this.#last = mono[n - 1]!;
    return true;
  }
}

/**
 * Plays `Int16Array` chunks posted to its port (`{ samples }`, or `{ clear: true }`): starts once
 * `jitterSamples` are queued, outputs silence and re-buffers on an underrun, and drops the oldest
 * audio beyond `maxSamples` so latency stays bounded. Resamples when the chunks' rate differs.
 */
class PcmPlayer extends AudioWorkletProcessor implements WorkletProcessor {
  readonly #jitter: number;
  readonly #max: number;
  readonly #ratio: number;
  #chunks: Float32Array[] = [];
  #offset = 0;
  #queued = 0;
  #playing = false;
  #underruns = 0;

  constructor(options: { processorOptions?: { inputRate: number; jitterSamples: number; maxSamples: number } }) {
    super();
    const o = options.processorOptions!;
    this.#ratio = sampleRate / o.inputRate;
    this.#jitter = Math.max(128, Math.round(o.jitterSamples * this.#ratio));
    this.#max = Math.max(this.#jitter * 2, Math.round(o.maxSamples * this.#ratio));
    this.port.onmessage = (e: MessageEvent<{ samples?: Int16Array; clear?: boolean }>) => {
      if (e.data.clear) {
        this.#chunks = [];
        this.#offset = 0;
        this.#queued = 0;
        this.#playing = false;
        return;
      }
      if (e.data.samples) this.#push(e.data.samples);
    };
  }

  #push(s: Int16Array): void {
    const outLen = Math.max(1, Math.round(s.length * this.#ratio));
    const f = new Float32Array(outLen);
    for (let i = 0; i < outLen; i++) {
      const x = i / this.#ratio;
      const j = Math.floor(x);
      const a = s[Math.min(j, s.length - 1)]!;
      const b = s[Math.min(j + 1, s.length - 1)]!;
      f[i] = (a + (b - a) * (x - j)) / 0x8000;
    }
    this.#chunks.push(f);
    this.#queued += outLen;
    while (this.#queued - this.#offset > this.#max && this.#chunks.length > 1) {
      const dropped = this.#chunks.shift()!;
      this.#queued -= dropped.length;
      this.#offset = 0;
    }
  }

  process(_inputs: Float32Array[][], outputs: Float32Array[][]): boolean {
    const out = outputs[0]?.[0];
    if (!out) return true;
    if (!this.#playing && this.#queued - this.#offset >= this.#jitter) this.#playing = true;
    if (!this.#playing) return true;
    let i = 0;
    while (i < out.length && this.#chunks.length > 0) {
      const c = this.#chunks[0]!;
      const n = Math.min(out.length - i, c.length - this.#offset);
      out.set(c.subarray(this.#offset, this.#offset + n), i);
      i += n;
      this.#offset += n;
      if (this.#offset === c.length) {
        this.#chunks.shift();
        this.#queued -= c.length;
        this.#offset = 0;
      }
    }
    if (i < out.length) {
      this.#playing = false;
      this.#underruns++;
      this.port.postMessage({ underruns: this.#underruns });
    }
    for (let ch = 1; ch < (outputs[0]?.length ?? 0); ch++) outputs[0]![ch]!.set(out);
    return true;
  }
}

registerProcessor('reactor-pcm-capture', PcmCapture);
registerProcessor('reactor-pcm-player', PcmPlayer);

export {};
