import 'reflect-metadata';
import { IsString } from 'class-validator';
import { describe, expect, it } from 'vitest';

class S { @IsString() prompt!: string; }

describe('toolchain', () => {
  it('emits decorator metadata for class fields', () => {
    expect(Reflect.getMetadata('design:type', S.prototype, 'prompt')).toBe(String);
  });
});
