import { IsInt, IsString, Max, MaxLength, Min } from 'class-validator';
import { describe, expect, it } from 'vitest';
import { AppDefinitionError, event, InputField, InputState, Output, ReactorApp, reactorApp, Video } from '../../src/index.js';
import { type AnyClass, describeApp } from '../../src/internal.js';

class State extends InputState {
  @InputField({ default: 'forest', description: 'What the video shows.' })
  @IsString()
  @MaxLength(100)
  prompt!: string;

  @InputField({ default: 1 })
  @IsInt()
  @Min(0)
  @Max(3)
  guidanceLevel!: number;
}

class JumpParams {
  @InputField({ description: 'Where to.' })
  @IsInt()
  @Min(0)
  frame!: number;
}

class VideoOut extends Output {
  @Video({ fps: 12 }) mainVideo?: Video;
  @Video() depthMap?: Video;
}

class StateUpdate {
  static description = 'The full state after a change.';
  @IsString() promptText!: string;
}

class Notice {}

@reactorApp({ state: State, output: VideoOut, messages: [StateUpdate, Notice], fps: 24, bufferSize: 8, name: 'demo', version: '2.0.0', description: 'A demo.' })
class Demo extends ReactorApp<State> {
  generate(): null {
    return null;
  }
  @event({ name: 'jump', description: 'Jump to a frame.', params: JumpParams })
  jump(): void {}
  @event({ name: 'set_prompt', description: 'Hand-written prompt setter.' })
  setPrompt(): void {}
  @event({ description: 'Named after the method.' })
  resetAll(): void {}
}

function definitionError(cls: AnyClass): AppDefinitionError {
  try {
    describeApp(cls);
  } catch (e) {
    if (e instanceof AppDefinitionError) return e;
    throw e;
  }
  throw new Error('expected describeApp to throw');
}

describe('describeApp', () => {
  it('publishes one schema: commands with JSON Schema params, state, messages and tracks', () => {
    expect(describeApp(Demo).schema).toEqual({
      protocol: 1,
      app: { name: 'demo', version: '2.0.0', description: 'A demo.' },
      state: {
        type: 'object',
        additionalProperties: false,
        properties: {
          prompt: { type: 'string', maxLength: 100, description: 'What the video shows.', default: 'forest' },
          guidance_level: { type: 'integer', minimum: 0, maximum: 3, default: 1 },
        },
      },
      commands: [
        // an @event named like a generated setter replaces it
        {
          name: 'set_prompt',
          kind: 'event',
          description: 'Hand-written prompt setter.',
          params: { type: 'object', properties: {}, additionalProperties: false },
        },
        {
          name: 'set_guidance_level',
          kind: 'setter',
          field: 'guidance_level',
          description: 'Sets guidance_level.',
          params: {
            type: 'object',
            additionalProperties: false,
            properties: { guidance_level: { type: 'integer', minimum: 0, maximum: 3, default: 1 } },
            required: ['guidance_level'],
          },
        },
        {
          name: 'jump',
          kind: 'event',
          description: 'Jump to a frame.',
          params: {
            type: 'object',
            additionalProperties: false,
            properties: { frame: { type: 'integer', minimum: 0, description: 'Where to.' } },
            required: ['frame'],
          },
        },
        { name: 'reset_all', kind: 'event', description: 'Named after the method.', params: { type: 'object', properties: {}, additionalProperties: false } },
      ],
      messages: [
        {
          name: 'state_update',
          description: 'The full state after a change.',
          schema: { type: 'object', properties: { prompt_text: { type: 'string' } }, required: ['prompt_text'] },
        },
        // A message class without fields says so: it never publishes a bare { type: 'object' }.
        { name: 'notice', schema: { type: 'object', properties: {} } },
      ],
      tracks: [
        { name: 'main_video', kind: 'video', direction: 'out', fps: 12 },
        { name: 'depth_map', kind: 'video', direction: 'out', fps: 24 },
      ],
    });
  });

  it('scans a class once and caches the result', () => {
    expect(describeApp(Demo)).toBe(describeApp(Demo));
    expect(describeApp(Demo).bufferSize).toBe(8);
  });

  it('accepts an app without @reactorApp (empty state, no tracks, defaults)', () => {
    class Bare extends ReactorApp {
      generate(): null {
        return null;
      }
    }
    const d = describeApp(Bare);
    expect([d.schema.app, d.schema.commands, d.tracks, d.bufferSize]).toEqual([{ name: 'Bare', version: '0.0.0' }, [], [], 16]);
  });

  it('rejects a class that is not a ReactorApp', () => {
    class NotAnApp {}
    expect(definitionError(NotAnApp).message).toMatchInlineSnapshot(
      `"NotAnApp: is not a ReactorApp subclass; declare it as \`class MyApp extends ReactorApp<State, Input, Result>\`"`,
    );
  });

  it('rejects two events with the same command name, naming the method', () => {
    class Dup extends ReactorApp {
      generate(): null {
        return null;
      }
      @event({ name: 'go' }) a(): void {}
      @event({ name: 'go' }) b(): void {}
    }
    const e = definitionError(Dup);
    expect([e.code, e.member]).toEqual(['duplicate_command', 'b']);
    expect(e.message).toMatchInlineSnapshot(`"Dup.b: declares command "go", already declared by a; give one a different name"`);
  });

  it('rejects a command name that is not snake_case', () => {
    class BadName extends ReactorApp {
      generate(): null {
        return null;
      }
      @event({ name: 'Go Now' }) go(): void {}
    }
    expect(definitionError(BadName).code).toBe('invalid_command_name');
  });

  it('checks params classes like state classes, naming the params class and field', () => {
    class BadParams {
      @InputField({ default: -1 })
      @IsInt()
      @Min(0)
      frame!: number;
    }
    class P extends ReactorApp {
      generate(): null {
        return null;
      }
      @event({ params: BadParams }) jump(): void {}
    }
    const e = definitionError(P);
    expect([e.code, e.className, e.member]).toEqual(['invalid_default', 'BadParams', 'frame']);
  });

  it('rejects bad options: fps, bufferSize, pacing, unknown keys, a state class not extending InputState', () => {
    const make = (options: object): AnyClass => {
      class A extends ReactorApp {
        generate(): null {
          return null;
        }
      }
      reactorApp(options as never)(A);
      return A;
    };
    expect(definitionError(make({ fps: 0 })).message).toMatchInlineSnapshot(`"A.fps: must be a positive number, got 0"`);
    expect(definitionError(make({ bufferSize: 1.5 })).message).toMatchInlineSnapshot(`"A.bufferSize: must be a positive integer (frames), got 1.5"`);
    expect(definitionError(make({ pacing: 'late' })).message).toMatchInlineSnapshot(`"A.pacing: must be 'just-in-time' or 'ahead', got \"late\""`);
    expect(definitionError(make({ buffersize: 3 })).code).toBe('invalid_app_option');
    expect(definitionError(make({ state: class Plain {} })).message).toMatchInlineSnapshot(`"A.state: the state class must extend InputState"`);
  });

  it('rejects an output class without tracks, or one that does not extend Output', () => {
    class Empty extends Output {}
    class A extends ReactorApp {
      generate(): null {
        return null;
      }
    }
    reactorApp({ output: Empty })(A);
    expect(definitionError(A).message).toMatchInlineSnapshot(`"Empty: declares no track; add one, e.g. \`@Video() mainVideo?: Video;\`"`);
    class B extends ReactorApp {
      generate(): null {
        return null;
      }
    }
    reactorApp({ output: class NotOutput {} as never })(B);
    expect(definitionError(B).code).toBe('invalid_output_class');
  });

  it('rejects two message classes with the same wire name', () => {
    const mk = () => class Notice {};
    class A extends ReactorApp {
      generate(): null {
        return null;
      }
    }
    reactorApp({ messages: [mk(), mk()] })(A);
    expect(definitionError(A).code).toBe('invalid_message_class');
  });
});
