/**
 * The type rules of `this.input`. The compile-time half is checked by `pnpm typecheck` (which
 * covers this folder): each `@ts-expect-error` line must be an error, or the check fails.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Audio, Input, InputBuffer, type InputBuffers, InputState, ReactorApp, reactorApp, Video } from '../../src/index.js';
import { useHosts } from '../../src/testing.js';

const start = useHosts(afterEach);

class CamInput extends Input {
  @Video() webcam!: InputBuffer<Uint8Array>;
  @Audio() mic!: InputBuffer<Int16Array>;
}
class DepthInput extends CamInput {
  @Video() depth!: InputBuffer<Uint8Array>;
}

describe('this.input typing', () => {
  it('types each track of the app’s Input class (fifth type parameter) as its InputBuffer', async () => {
    @reactorApp({ input: CamInput })
    class CamApp extends ReactorApp<InputState, null, null, never, CamInput> {
      generate(): null {
        const video: InputBuffer<Uint8Array> = this.input.webcam;
        const audio: InputBuffer<Int16Array> = this.input.mic;
        // @ts-expect-error -- a video track's frames carry bytes, not PCM samples
        const wrong: InputBuffer<Int16Array> = this.input.webcam;
        // @ts-expect-error -- CamInput has no track "depth"
        void this.input.depth;
        // @ts-expect-error -- the buffers are read-only properties
        this.input.mic = audio;
        void [video, wrong];
        return null;
      }
    }
    const host = start(CamApp);
    const app = host.app as CamApp;
    expect(app.input.webcam).toBeInstanceOf(InputBuffer);
    expect(app.input.mic.name).toBe('mic');
  });

  it('gives an app typed without an Input class no tracks', () => {
    @reactorApp({ input: CamInput })
    class Untyped extends ReactorApp {
      generate(): null {
        // @ts-expect-error -- the app names no Input class in its type, so this.input has no track
        void this.input.webcam;
        return null;
      }
    }
    const buffers: InputBuffers<Input> = {};
    expect([typeof Untyped, buffers]).toEqual(['function', {}]);
  });

  it('refuses, at compile time, an @reactorApp input class that lacks a track the app is typed with', () => {
    // @ts-expect-error -- typed with DepthInput (webcam, mic, depth) but declares CamInput (no depth)
    @reactorApp({ input: CamInput })
    class Lacks extends ReactorApp<InputState, null, null, never, DepthInput> {
      generate(): null {
        return null;
      }
    }
    // @ts-expect-error -- typed with CamInput but declares no input class at all
    @reactorApp({})
    class Missing extends ReactorApp<InputState, null, null, never, CamInput> {
      generate(): null {
        return null;
      }
    }
    // A declared class with more tracks than the app reads is fine.
    @reactorApp({ input: DepthInput })
    class ReadsFewer extends ReactorApp<InputState, null, null, never, CamInput> {
      generate(): null {
        return null;
      }
    }
    expect([Lacks, Missing, ReadsFewer].map((c) => c.name)).toEqual(['Lacks', 'Missing', 'ReadsFewer']);
  });
});
