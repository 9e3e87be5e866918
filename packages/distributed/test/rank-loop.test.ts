import { describe, expect, it } from 'vitest';
import { RankLoop } from '../src/process/rank-loop.js';
import type { ChildMessage } from '../src/protocol.js';
import { encodeValue } from '../src/shm/codec.js';
import { SegmentReader, SegmentWriter, fromPayload, listSegments, toPayload, unlinkSegments } from '../src/shm/segments.js';

// The rank loop driven in-process through its send/exit parameters.
describe('RankLoop', () => {
  const prefix = `reactor-${process.pid}-childloop`;
  const env = { backend: 'native' as const, maxShmBytes: null };
  const echoUrl = new URL('./fixtures/echo.mjs', import.meta.url).href;

  function harness() {
    const sent: ChildMessage[] = [];
    const exits: number[] = [];
    const loop = new RankLoop({ send: (m) => sent.push(m), exit: (c) => exits.push(c) });
    const input = new SegmentWriter(env, `${prefix}-in`, 'test input');
    return { sent, exits, loop, input };
  }

  it('loads the worker, answers calls and writes rank 0 results to shared memory', async () => {
    const { sent, exits, loop, input } = harness();
    try {
      await loop.handle({
        t: 'init', version: 1, rank: 0, worldSize: 1, device: 'cpu', moduleUrl: echoUrl, exportName: 'EchoWorker',
        prefix, backend: 'native', maxShmBytes: null, args: toPayload(encodeValue({ k: 'v' }), input),
      });
      expect(sent).toEqual([{ t: 'loaded' }]);
      await loop.handle({ t: 'call', id: 1, op: 'generate', input: toPayload(encodeValue({ payloadBytes: 4096 }), input) });
      const result = sent[1] as Extract<ChildMessage, { t: 'result' }>;
      expect(result).toMatchObject({ t: 'result', id: 1 });
      const reader = new SegmentReader(env);
      const value = fromPayload(result.value!, reader) as { frames: Uint8Array; step: number };
      expect(value.step).toBe(1);
      expect(value.frames.byteLength).toBe(4096);
      reader.close();
      await loop.handle({ t: 'call', id: 2, op: 'generate', input: toPayload(encodeValue({ throwOn: [0] }), input) });
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
    expect(sent[0]).toMatchObject({ t: 'fatal', error: { type: 'ProtocolError', message: 'Rank received an unknown message from the parent: {"t":"bogus"}.' } });
    expect(exits).toEqual([1]);
  });

  it('reports a load error with its type', async () => {
    const { sent, loop, input } = harness();
    try {
      await loop.handle({
        t: 'init', version: 1, rank: 0, worldSize: 1, device: 'cpu', moduleUrl: echoUrl, exportName: 'Nope',
        prefix, backend: 'native', maxShmBytes: null, args: toPayload(encodeValue(null), input),
      });
      expect(sent[0]).toMatchObject({ t: 'loadFailed', error: { type: 'TypeError' } });
    } finally {
      input.dispose();
      unlinkSegments(prefix);
    }
  });
});
