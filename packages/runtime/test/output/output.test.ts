import { describe, expect, it } from 'vitest';
import { Audio, FrameShapeError, Frames, Input, Output, ReactorApp, reactorApp, TrackPayload, Video } from '../../src/index.js';
import { describeApp } from '../../src/internal.js';
import { type Chunk, normalizeOutput, type QueuedFrame } from '../../src/session/normalize.js';
import { rgbFrames } from '../../src/testing.js';

class Out extends Output {
  @Video() main?: Video;
  @Video({ width: 2, height: 2, fps: 10 }) thumb?: Video;
}
class OtherOut extends Output {
  @Video() main?: Video;
}

@reactorApp({ output: Out })
class App extends ReactorApp {
  generate(): null {
    return null;
  }
}
const def = describeApp(App);

/** A video track's entries of a chunk (no audio-only slots in these tests). */
function video(chunk: Chunk, track: number): QueuedFrame[] {
  return chunk[track] as QueuedFrame[];
}

function shapeError(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    if (e instanceof FrameShapeError) return e.message;
    if (e instanceof Error) return `${e.name}: ${e.message}`;
  }
  throw new Error('expected an error');
}

describe('Frames', () => {
  it('checks the shape (n, height, width, 3) against the byte count', () => {
    expect(new Frames(rgbFrames(2, 4, 3), [2, 3, 4, 3]).n).toBe(2);
    expect(shapeError(() => new Frames(rgbFrames(2, 4, 3), [2, 4, 4, 3]))).toMatchInlineSnapshot(
      `"frame shape [2, 4, 4, 3] needs 96 bytes, but the array has 72"`,
    );
    expect(shapeError(() => new Frames(rgbFrames(1, 2, 2), [1, 2, 2, 4]))).toMatchInlineSnapshot(
      `"frame shape must be [n, height, width, 3] with positive integers, got [1,2,2,4]"`,
    );
    expect(shapeError(() => new Frames([1, 2, 3] as never, [1, 1, 1, 3]))).toMatchInlineSnapshot(`"frames must be a Uint8Array of RGB bytes, got Array"`);
  });
});

describe('normalizeOutput', () => {
  it('splits a batch into per-frame views (no copy) with per-frame interval from measured time', () => {
    const frames = new Frames(rgbFrames(4, 2, 2), [4, 2, 2, 3]);
    const chunk = normalizeOutput(def, new Out({ main: frames }), 80);
    expect(video(chunk, 0).map((f) => [f.width, f.height, f.rgb.length, f.intervalMs])).toEqual(Array(4).fill([2, 2, 12, 20]));
    expect(video(chunk, 0)[1]!.rgb.buffer).toBe(frames.data.buffer);
    expect(chunk[1]).toBeUndefined();
  });

  it("uses a track's declared size for bare bytes and its fps for pacing", () => {
    const chunk = normalizeOutput(def, Out.of({ thumb: rgbFrames(3, 2, 2) }), 5);
    expect(chunk[1]!.map((f) => f.intervalMs)).toEqual([100, 100, 100]);
  });

  it('carries batch metadata to every frame and per-frame metadata to each', () => {
    const a = normalizeOutput(def, new Out({ main: new TrackPayload(rgbFrames(2, 1, 1), { width: 1, height: 1, metadata: { k: 1 } }) }), 0);
    expect(video(a, 0).map((f) => f.metadata)).toEqual([{ k: 1 }, { k: 1 }]);
    const b = normalizeOutput(def, new Out({ main: new TrackPayload(rgbFrames(2, 1, 1), { width: 1, height: 1, frameMetadata: ['x', 'y'] }) }), 0);
    expect(video(b, 0).map((f) => f.metadata)).toEqual(['x', 'y']);
  });

  it('explains every malformed payload', () => {
    expect(shapeError(() => normalizeOutput(def, new Out({ main: rgbFrames(1, 2, 2) }), 0))).toMatchInlineSnapshot(
      `"track main: bare RGB bytes need a frame size; wrap them as new Frames(bytes, [n, height, width, 3]) or declare @Video({ width, height })"`,
    );
    expect(shapeError(() => normalizeOutput(def, new Out({ main: new TrackPayload(rgbFrames(1, 2, 2), { width: 3, height: 3 }) }), 0))).toMatchInlineSnapshot(
      `"track main: 12 bytes is not a whole number of 3x3 RGB frames (27 bytes each)"`,
    );
    expect(shapeError(() => normalizeOutput(def, new Out({ thumb: new Frames(rgbFrames(1, 3, 3), [1, 3, 3, 3]) }), 0))).toMatchInlineSnapshot(
      `"track thumb is declared 2x2 but got 3x3 frames"`,
    );
    expect(
      shapeError(() => normalizeOutput(def, new Out({ main: new TrackPayload(rgbFrames(2, 1, 1), { width: 1, height: 1, frameMetadata: ['x'] }) }), 0)),
    ).toMatchInlineSnapshot(`"track main: frameMetadata has 1 entries for 2 frames; give one per frame"`);
    expect(shapeError(() => normalizeOutput(def, new Out({ mian: rgbFrames(1, 1, 1) } as never), 0))).toMatchInlineSnapshot(
      `"UnknownTrackError: Out has no track "mian"; declared tracks: main, thumb"`,
    );
    expect(shapeError(() => normalizeOutput(def, new OtherOut({ main: rgbFrames(1, 1, 1) }), 0))).toMatchInlineSnapshot(
      `"InvalidOutputError: processOutput() returned a OtherOut; the app declares output Out"`,
    );
  });
});

describe('normalizeOutput: audio', () => {
  class AvOut extends Output {
    @Video() main?: Video;
    @Audio({ sampleRate: 8000 }) sound?: Audio;
  }
  class CamIn extends Input {
    @Video() cam?: Video;
  }
  @reactorApp({ output: AvOut, input: CamIn })
  class AvApp extends ReactorApp {
    generate(): null {
      return null;
    }
  }
  class SoundOnly extends Output {
    @Audio() voice?: Audio;
  }
  @reactorApp({ output: SoundOnly })
  class SoundApp extends ReactorApp {
    generate(): null {
      return null;
    }
  }
  const av = describeApp(AvApp);
  const pcm = (n: number): Int16Array => Int16Array.from({ length: n }, (_, i) => i);

  it('splits a step audio across its frames in proportion: every sample once, in order, as views without a copy', () => {
    const sound = pcm(10);
    const chunk = normalizeOutput(av, new AvOut({ main: new Frames(rgbFrames(4, 1, 1), [4, 1, 1, 3]), sound }), 40);
    // Outbound tracks are indexed after the inbound one in the schema, from 0 in the chunk.
    expect(av.tracks.map((t) => t.index)).toEqual([1, 2]);
    const frames = video(chunk, 0);
    expect(frames).toHaveLength(4);
    expect(chunk[1]).toBeUndefined();
    const pieces = frames.map((f) => f.audio!.map((a) => [a.track.name, Array.from(a.pcm)]));
    expect(pieces).toEqual([[['sound', [0, 1, 2]]], [['sound', [3, 4]]], [['sound', [5, 6, 7]]], [['sound', [8, 9]]]]);
    expect(frames[2]!.audio![0]!.pcm.buffer).toBe(sound.buffer);
  });

  it('gives a frame no piece when the step has fewer samples than frames', () => {
    const chunk = normalizeOutput(av, new AvOut({ main: new Frames(rgbFrames(4, 1, 1), [4, 1, 1, 3]), sound: pcm(2) }), 40);
    expect(video(chunk, 0).map((f) => f.audio?.map((a) => Array.from(a.pcm)) ?? [])).toEqual([[[0]], [], [[1]], []]);
  });

  it('paces audio without frames by its own duration, on the clock track (first video, else the audio track)', () => {
    const alone = normalizeOutput(av, new AvOut({ sound: pcm(400) }), 5);
    expect(alone[0]).toEqual([{ intervalMs: 50, audio: [{ track: av.tracks[1], pcm: expect.any(Int16Array) }] }]);
    expect(alone[1]).toBeUndefined();
    const only = describeApp(SoundApp);
    expect(only.tracks[0]!.sampleRate).toBe(48_000);
    const chunk = normalizeOutput(only, new SoundOnly({ voice: pcm(960) }), 5);
    expect(chunk[0]!.map((s) => [s.rgb, s.intervalMs, s.audio!.length])).toEqual([[undefined, 20, 1]]);
  });

  it('explains every malformed audio payload, naming the track', () => {
    const frames = new Frames(rgbFrames(1, 1, 1), [1, 1, 1, 3]);
    expect(shapeError(() => normalizeOutput(av, new AvOut({ main: frames, sound: new Float32Array(4) as never }), 0))).toMatchInlineSnapshot(
      `"track sound: payload is a Float32Array; an audio track takes an Int16Array of mono PCM samples at 8000 Hz (floats in [-1, 1]: Math.round(x * 32767))"`,
    );
    expect(shapeError(() => normalizeOutput(av, new AvOut({ main: frames, sound: frames as never }), 0))).toMatchInlineSnapshot(
      `"track sound: payload is a Frames; an audio track takes an Int16Array of mono PCM samples at 8000 Hz (floats in [-1, 1]: Math.round(x * 32767))"`,
    );
    expect(shapeError(() => normalizeOutput(av, new AvOut({ main: frames, sound: new Int16Array(0) }), 0))).toMatchInlineSnapshot(
      `"track sound: the Int16Array is empty; leave the track out of the Output for a step without audio"`,
    );
    expect(
      shapeError(() => normalizeOutput(av, new AvOut({ sound: new TrackPayload(pcm(4) as never, { metadata: { k: 1 } }) as never }), 0)),
    ).toMatchInlineSnapshot(`"InvalidOutputError: track sound is an audio track: it takes no metadata or TrackPayload; pass the Int16Array of samples itself"`);
    expect(shapeError(() => normalizeOutput(av, new AvOut({ main: pcm(3) as never }), 0))).toMatchInlineSnapshot(
      `"track main: payload is a Int16Array (an Int16Array is audio: declare an @Audio() track for it); use Frames, TrackPayload or a Uint8Array of RGB bytes"`,
    );
  });
});
