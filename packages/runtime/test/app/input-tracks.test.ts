import { describe, expect, it } from 'vitest';
import { AppDefinitionError, Audio, Input, Output, ReactorApp, reactorApp, Video } from '../../src/index.js';
import { type AnyClass, describeApp } from '../../src/internal.js';

function failure(cls: AnyClass): AppDefinitionError {
  try {
    describeApp(cls);
  } catch (err) {
    expect(err).toBeInstanceOf(AppDefinitionError);
    return err as AppDefinitionError;
  }
  throw new Error('describeApp accepted the class');
}

class AvOutput extends Output {
  @Video({ fps: 20 }) mainVideo?: Video;
  @Audio({ sampleRate: 24000 }) soundtrack?: Audio;
}

describe('inbound and audio tracks in the schema', () => {
  it('lists inbound tracks first, each with its direction, capture request, limits and defaults', () => {
    class CamInput extends Input {
      @Video({ width: 320, height: 240, fps: 15 }) webcam?: unknown;
      @Audio() mic?: unknown;
    }
    @reactorApp({ input: CamInput, output: AvOutput })
    class CamApp extends ReactorApp {
      generate(): null {
        return null;
      }
    }
    const def = describeApp(CamApp);
    expect(def.schema.tracks).toEqual([
      { name: 'webcam', kind: 'video', direction: 'in', width: 320, height: 240, fps: 15, maxWidth: 1920, maxHeight: 1080, maxFps: 30 },
      { name: 'mic', kind: 'audio', direction: 'in', sampleRate: 48000, maxFps: 100 },
      { name: 'main_video', kind: 'video', direction: 'out', fps: 20 },
      { name: 'soundtrack', kind: 'audio', direction: 'out', sampleRate: 24000 },
    ]);
    // Outbound tracks carry their place in schema.tracks, which binary frame headers use.
    expect(def.tracks.map((t) => [t.name, t.index])).toEqual([
      ['main_video', 2],
      ['soundtrack', 3],
    ]);
    expect(def.inputTracks.map((t) => [t.name, t.index, t.capacity])).toEqual([
      ['webcam', 0, 128],
      ['mic', 1, 128],
    ]);
  });

  it('refuses a track name used in both directions, an input class that is not an Input, and out-of-range options', () => {
    class Same extends Input {
      @Video() mainVideo?: unknown;
    }
    @reactorApp({ input: Same, output: AvOutput })
    class Clash extends ReactorApp {
      generate(): null {
        return null;
      }
    }
    expect(failure(Clash).message).toContain('track "main_video" is also an inbound track of Same');

    @reactorApp({ input: AvOutput as never })
    class NotInput extends ReactorApp {
      generate(): null {
        return null;
      }
    }
    expect(failure(NotInput).code).toBe('invalid_input_class');

    class BadRate extends Input {
      @Audio({ sampleRate: 1000 }) mic?: unknown;
    }
    @reactorApp({ input: BadRate })
    class RateApp extends ReactorApp {
      generate(): null {
        return null;
      }
    }
    const rate = failure(RateApp);
    expect([rate.code, rate.message]).toEqual(['invalid_track', expect.stringContaining('sampleRate must be an integer from 8000 to 192000')]);

    class TooBig extends Input {
      @Video({ width: 4000, height: 3000, maxWidth: 1920 }) webcam?: unknown;
    }
    @reactorApp({ input: TooBig })
    class BigApp extends ReactorApp {
      generate(): null {
        return null;
      }
    }
    expect(failure(BigApp).message).toContain('the capture size 4000x3000 exceeds the limit 1920x3000');

    class InboundOption extends Output {
      @Video({ maxFps: 10 }) mainVideo?: Video;
    }
    @reactorApp({ output: InboundOption })
    class OptApp extends ReactorApp {
      generate(): null {
        return null;
      }
    }
    expect(failure(OptApp).message).toContain('maxFps applies to inbound tracks only');
  });
});
