import { describe, expect, it } from 'vitest';
import { FrameShapeError, Frames, Output, ReactorApp, reactorApp, TrackPayload, Video } from '../../src/index.js';
import { describeApp } from '../../src/internal.js';
import { normalizeOutput } from '../../src/session/normalize.js';
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
    expect(chunk[0]!.map((f) => [f.width, f.height, f.rgb.length, f.intervalMs])).toEqual(Array(4).fill([2, 2, 12, 20]));
    expect(chunk[0]![1]!.rgb.buffer).toBe(frames.data.buffer);
    expect(chunk[1]).toBeUndefined();
  });

  it("uses a track's declared size for bare bytes and its fps for pacing", () => {
    const chunk = normalizeOutput(def, Out.of({ thumb: rgbFrames(3, 2, 2) }), 5);
    expect(chunk[1]!.map((f) => f.intervalMs)).toEqual([100, 100, 100]);
  });

  it('carries batch metadata to every frame and per-frame metadata to each', () => {
    const a = normalizeOutput(def, new Out({ main: new TrackPayload(rgbFrames(2, 1, 1), { width: 1, height: 1, metadata: { k: 1 } }) }), 0);
    expect(a[0]!.map((f) => f.metadata)).toEqual([{ k: 1 }, { k: 1 }]);
    const b = normalizeOutput(def, new Out({ main: new TrackPayload(rgbFrames(2, 1, 1), { width: 1, height: 1, frameMetadata: ['x', 'y'] }) }), 0);
    expect(b[0]!.map((f) => f.metadata)).toEqual(['x', 'y']);
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
