import { IsArray, IsBoolean, IsIn, IsInt, IsString, Max, MaxLength, Min, MinLength } from 'class-validator';
import { describe, expect, it } from 'vitest';
import { AppDefinitionError, InputField, InputState } from '../../src/index.js';
import { FieldSet } from '../../src/state/field-set.js';

class Settings extends InputState {
  @InputField({ default: 'forest', description: 'What the video shows.', moderate: true })
  @IsString()
  @MinLength(1)
  @MaxLength(20)
  prompt!: string;

  @InputField({ default: 4, description: 'Steps per chunk.' })
  @IsInt()
  @Min(1)
  @Max(8)
  maxSteps!: number;

  @InputField({ default: 'fast' })
  @IsIn(['fast', 'slow'])
  speed!: string;

  @InputField({ description: 'Required: no default.' })
  @IsBoolean()
  enabled!: boolean;

  @InputField({ defaultFactory: () => [] as string[] })
  @IsArray()
  tags!: string[];

  @InputField({ default: 0 })
  _counter!: number;
}

function compileError(cls: new () => object): AppDefinitionError {
  try {
    FieldSet.compile(cls);
  } catch (e) {
    if (e instanceof AppDefinitionError) return e;
    throw e;
  }
  throw new Error('expected FieldSet.compile to throw');
}

describe('FieldSet', () => {
  const set = FieldSet.compile(Settings);

  describe('compile', () => {
    it('gives public fields snake_case wire names and keeps _-prefixed fields private', () => {
      expect(set.publicFields.map((f) => f.wire)).toEqual(['prompt', 'max_steps', 'speed', 'enabled', 'tags']);
      expect(set.fields.find((f) => f.property === '_counter')?.isPrivate).toBe(true);
    });

    it('turns constraints, descriptions, defaults and moderate into JSON Schema', () => {
      expect(set.objectSchema()).toEqual({
        type: 'object',
        additionalProperties: false,
        properties: {
          prompt: { type: 'string', minLength: 1, maxLength: 20, description: 'What the video shows.', default: 'forest', 'x-moderate': true },
          max_steps: { type: 'integer', minimum: 1, maximum: 8, description: 'Steps per chunk.', default: 4 },
          speed: { enum: ['fast', 'slow'], type: 'string', default: 'fast' },
          enabled: { type: 'boolean', description: 'Required: no default.' },
          tags: { type: 'array', items: {} },
        },
        required: ['enabled'],
      });
    });

    it('publishes the key bindings of an action field (keys) as x-reactor-keys, and refuses bindings that are not lower-case keys to values', () => {
      class Walk extends InputState {
        @InputField({ default: Object.freeze([]) as unknown as string[], keys: { w: 'forward', arrowleft: 'turn_left' } })
        @IsArray()
        @IsIn(['forward', 'turn_left'], { each: true })
        keys!: string[];
      }
      expect(FieldSet.compile(Walk).publicFields[0]!.schema['x-reactor-keys']).toEqual({ w: 'forward', arrowleft: 'turn_left' });
      class Upper extends InputState {
        @InputField({ default: Object.freeze([]) as unknown as string[], keys: { W: 'forward' } })
        @IsArray()
        keys!: string[];
      }
      const e = compileError(Upper);
      expect(e.code).toBe('invalid_state_field');
      expect(e.message).toContain('Upper.keys: keys entry "W": "forward" is not a lower-case key to a non-empty string');
      class Empty extends InputState {
        @InputField({ default: Object.freeze([]) as unknown as string[], keys: { w: '' } })
        @IsArray()
        keys!: string[];
      }
      expect(compileError(Empty).code).toBe('invalid_state_field');
    });

    it('rejects a default that breaks its own constraints, naming class and field', () => {
      class Bad extends InputState {
        @InputField({ default: 'x'.repeat(30) })
        @IsString()
        @MaxLength(20)
        prompt!: string;
      }
      const e = compileError(Bad);
      expect(e.code).toBe('invalid_default');
      expect(e.message).toMatchInlineSnapshot(
        `"Bad.prompt: default "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" breaks its own constraints (prompt must be shorter than or equal to 20 characters); fix the default or the constraint"`,
      );
    });

    it('rejects a shared mutable default (array or object) and accepts a frozen one', () => {
      class Shared extends InputState {
        @InputField({ default: ['a'] })
        @IsArray()
        tags!: string[];
      }
      const e = compileError(Shared);
      expect(e.code).toBe('mutable_default');
      expect(e.message).toMatchInlineSnapshot(
        `"Shared.tags: default is a mutable array that every session would share; use defaultFactory: () => (a fresh value), or Object.freeze() it"`,
      );
      class Obj extends InputState {
        @InputField({ default: { a: 1 } })
        @IsArray()
        opts!: object;
      }
      expect(compileError(Obj).code).toBe('mutable_default');
      class Frozen extends InputState {
        @InputField({ default: Object.freeze(['a']) })
        @IsArray()
        tags!: readonly string[];
      }
      expect(() => FieldSet.compile(Frozen)).not.toThrow();
    });

    it('rejects a public field without any class-validator constraint', () => {
      class Loose extends InputState {
        @InputField({ default: 1 })
        level!: number;
      }
      const e = compileError(Loose);
      expect(e.code).toBe('unvalidated_field');
      expect(e.className).toBe('Loose');
      expect(e.member).toBe('level');
    });

    it('rejects a constrained public field that lacks @InputField', () => {
      class Forgot extends InputState {
        @IsString()
        prompt!: string;
      }
      const e = compileError(Forgot);
      expect(e.code).toBe('undeclared_field');
      expect(e.message).toContain('Forgot.prompt');
    });

    it('rejects default together with defaultFactory', () => {
      class Both extends InputState {
        @InputField({ default: 1, defaultFactory: () => 2 })
        @IsInt()
        n!: number;
      }
      expect(compileError(Both).code).toBe('invalid_default');
    });

    it('inherits fields from a base state class; a subclass may redeclare one', () => {
      class Base extends InputState {
        @InputField({ default: 'a' })
        @IsString()
        name!: string;
      }
      class Child extends Base {
        @InputField({ default: 2 })
        @IsInt()
        size!: number;
      }
      const child = FieldSet.compile(Child);
      expect(child.publicFields.map((f) => f.wire)).toEqual(['name', 'size']);
      expect(child.snapshot(child.createDefaults())).toEqual({ name: 'a', size: 2 });
    });
  });

  describe('createDefaults', () => {
    it('builds a fresh instance per call; factories give each its own value', () => {
      const one = set.createDefaults() as Settings;
      const two = set.createDefaults() as Settings;
      expect(one).toBeInstanceOf(Settings);
      expect(one.tags).not.toBe(two.tags);
      expect(set.snapshot(one)).toEqual({ prompt: 'forest', max_steps: 4, speed: 'fast', enabled: undefined, tags: [] });
      expect(one._counter).toBe(0);
    });
  });

  describe('validatePayload', () => {
    it('applies defaults and accepts a valid payload', async () => {
      const r = await set.validatePayload({ enabled: true, max_steps: 2 });
      expect(r.ok).toBe(true);
      if (r.ok) expect([(r.value as Settings).maxSteps, (r.value as Settings).prompt]).toEqual([2, 'forest']);
    });

    it('reports unknown and private keys (whitelistValidation), missing required fields and broken constraints by wire name', async () => {
      const r = await set.validatePayload({ max_steps: 9, speed: 'warp', extra: 1, _counter: 5, maxSteps: 3 });
      expect(r).toEqual({
        ok: false,
        errors: [
          { field: 'extra', constraint: 'whitelistValidation', message: 'property extra should not exist' },
          { field: '_counter', constraint: 'whitelistValidation', message: 'property _counter should not exist' },
          { field: 'maxSteps', constraint: 'whitelistValidation', message: 'property maxSteps should not exist' },
          { field: 'enabled', constraint: 'required', message: 'enabled is required' },
          { field: 'max_steps', constraint: 'max', message: 'max_steps must not be greater than 8' },
          { field: 'speed', constraint: 'isIn', message: 'speed must be one of the following values: fast, slow' },
        ],
      });
    });
  });

  describe('validateField', () => {
    it('checks one value against that field only', async () => {
      const f = set.field('max_steps')!;
      expect(await set.validateField(f, 3)).toEqual([]);
      // A value of the wrong type: one detail, the type (the range checks fail only because of it).
      expect(await set.validateField(f, 'many')).toEqual([{ field: 'max_steps', constraint: 'isInt', message: 'max_steps must be an integer number' }]);
      expect(await set.validateField(f, 9)).toEqual([{ field: 'max_steps', constraint: 'max', message: 'max_steps must not be greater than 8' }]);
      expect(await set.validateField(f, 0)).toEqual([{ field: 'max_steps', constraint: 'min', message: 'max_steps must not be less than 1' }]);
    });
  });
});
