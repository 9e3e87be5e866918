import { describe, expect, it } from 'vitest';
import { FAULT_CRASH_EXIT_CODE } from '../src/faults.js';
import { RANK_LOOP_TRANSITIONS, RankLoop } from '../src/process/rank-loop.js';
import { PROTOCOL_VERSION, type ChildMessage } from '../src/protocol.js';
import { encodeValue } from '../src/shm/codec.js';
import { SegmentReader, SegmentWriter, fromPayload, listSegments, toPayload, unlinkSegments } from '../src/shm/segments.js';

// The rank loop driven in-process through its send/exit parameters.
describe('RankLoop', () => {
  const prefix = `reactor-${process.pid}-childloop`;
  const env = { backend: 'native' as const, maxShmBytes: null };
  const echoUrl = new URL('./fixtures/echo.mjs', import.meta.url).href;

  /** The parent's `init` message for one rank of the echo fixture. */
  function init(input: SegmentWriter, options: { args?: unknown; exportName?: string; faults?: unknown[] } = {}) {
    return {
      t: 'init',
      version: PROTOCOL_VERSION,
      rank: 0,
      worldSize: 1,
      device: 'cpu',
      moduleUrl: echoUrl,
      exportName: options.exportName ?? 'EchoWorker',
      prefix,
      backend: 'native',
      maxShmBytes: null,
      args: toPayload(encodeValue(options.args ?? null), input),
      faults: options.faults ?? [],
      verifyInputs: false,
      slots: 1,
      outputRank: 0,
    } as const;
  }

  function harness() {
    const sent: ChildMessage[] = [];
    const exits: number[] = [];
    const warnings: string[] = [];
    let stops = 0;
    const loop = new RankLoop({
      send: (m) => sent.push(m),
      exit: (c) => exits.push(c),
      warn: (l) => warnings.push(l),
      stopSelf: () => stops++,
    });
    const input = new SegmentWriter(env, `${prefix}-in`, 'test input');
    return { sent, exits, warnings, stops: () => stops, loop, input };
  }

  it('loads the worker, answers calls and writes rank 0 results to shared memory', async () => {
    const { sent, exits, loop, input } = harness();
    try {
      await loop.handle(init(input, { args: { k: 'v' } }));
      expect(sent).toEqual([{ t: 'loaded' }]);
      await loop.handle({ t: 'call', id: 1, op: 'generate', collSeq: 0, input: toPayload(encodeValue({ payloadBytes: 4096 }), input) });
      const result = sent[1] as Extract<ChildMessage, { t: 'result' }>;
      expect(result).toMatchObject({ t: 'result', id: 1 });
      const reader = new SegmentReader(env);
      const value = fromPayload(result.value!, reader) as { frames: Uint8Array; step: number };
      expect(value.step).toBe(1);
      expect(value.frames.byteLength).toBe(4096);
      reader.close();
      await loop.handle({ t: 'call', id: 2, op: 'generate', collSeq: 0, input: toPayload(encodeValue({ throwOn: [0] }), input) });
      expect(sent[2]).toMatchObject({ t: 'failed', id: 2, error: { type: 'RolloutExhausted', name: 'RolloutExhausted', props: { chunk: 7 } } });
      await loop.handle({ t: 'exit' });
      expect(exits).toEqual([0]);
    } finally {
      input.dispose();
      loop.dispose();
    }
    expect(listSegments(prefix)).toEqual([]);
  });

  it('reports an unknown message as a fatal ProtocolError and exits', async () => {
    const { sent, exits, loop } = harness();
    await loop.handle({ t: 'bogus' });
    expect(sent[0]).toMatchObject({
      t: 'fatal',
      error: { type: 'ProtocolError', message: 'Rank received an unknown message from the parent: {"t":"bogus"}.' },
    });
    expect(exits).toEqual([1]);
  });

  it('reports a load error with its type', async () => {
    const { sent, loop, input } = harness();
    try {
      await loop.handle(init(input, { exportName: 'Nope' }));
      expect(sent[0]).toMatchObject({ t: 'loadFailed', error: { type: 'TypeError' } });
    } finally {
      input.dispose();
      unlinkSegments(prefix);
    }
  });

  describe('state machine', () => {
    it('has exactly the documented edges', () => {
      expect(RANK_LOOP_TRANSITIONS).toEqual({
        new: ['loading', 'exiting'],
        loading: ['ready', 'failed', 'exiting'],
        ready: ['busy', 'exiting'],
        busy: ['ready', 'exiting'],
        failed: ['exiting'],
        exiting: [],
      });
    });

    it('refuses a call before init as a fatal IllegalTransitionError and exits', async () => {
      const { sent, exits, loop } = harness();
      await loop.handle({ t: 'call', id: 1, op: 'generate', collSeq: 0, input: null });
      expect(sent[0]).toMatchObject({
        t: 'fatal',
        error: { type: 'IllegalTransitionError', code: 'illegal_transition', message: 'RankLoop(rank ?): illegal state transition new -> busy.' },
      });
      expect(exits).toEqual([1]);
      expect(loop.state).toBe('exiting');
    });

    it('refuses a second init, and a call while one runs', async () => {
      const { sent, exits, loop, input } = harness();
      try {
        await loop.handle(init(input));
        expect(loop.state).toBe('ready');
        await loop.handle(init(input));
        expect(sent[1]).toMatchObject({
          t: 'fatal',
          error: { type: 'IllegalTransitionError', message: 'RankLoop(rank 0): illegal state transition ready -> loading.' },
        });
        expect(exits).toEqual([1]);
      } finally {
        input.dispose();
        loop.dispose();
      }
      const second = harness();
      try {
        await second.loop.handle(init(second.input, { faults: [{ rank: 0, call: 1, kind: 'hang' }] }));
        void second.loop.handle({ t: 'call', id: 1, op: 'generate', collSeq: 0, input: null });
        expect(second.loop.state).toBe('busy');
        await second.loop.handle({ t: 'call', id: 2, op: 'generate', collSeq: 0, input: null });
        expect(second.sent[1]).toMatchObject({ t: 'fatal', error: { message: 'RankLoop(rank 0): illegal state transition busy -> busy.' } });
        expect(second.warnings).toEqual(['injected fault: hang on rank 0 at generate() call 1']);
      } finally {
        second.input.dispose();
        second.loop.dispose();
      }
      expect(listSegments(prefix)).toEqual([]);
    });

    it('injects the crash and stall faults at the chosen call through its I/O', async () => {
      const h = harness();
      try {
        await h.loop.handle(
          init(h.input, {
            faults: [
              { rank: 0, call: 2, kind: 'stall' },
              { rank: 0, call: 3, kind: 'crash' },
            ],
          }),
        );
        await h.loop.handle({ t: 'call', id: 1, op: 'generate', collSeq: 0, input: null });
        expect(h.stops()).toBe(0);
        await h.loop.handle({ t: 'call', id: 2, op: 'generate', collSeq: 0, input: null });
        expect(h.stops()).toBe(1);
        await h.loop.handle({ t: 'call', id: 3, op: 'generate', collSeq: 0, input: null });
        expect(h.exits).toEqual([FAULT_CRASH_EXIT_CODE]);
      } finally {
        h.input.dispose();
        h.loop.dispose();
      }
    });
  });
});
