// The world app's error classes: the names the Python ranks raise (the runner rebuilds a rank's
// error as the class of the same name), each with its code from WorldErrorCode.
import { describe, expect, it } from 'vitest';
import { CodedError } from '@reactor/protocol';
import { CheckpointError, ConfigError, TextEncoderError, WorldConfigError, WorldErrorCode, WorldInputInvalid, WorldOutOfMemory } from '../src/errors.js';

describe('world errors', () => {
  it('each class carries its own code and name and is a CodedError', () => {
    const cases: [new (m: string) => CodedError, string][] = [
      [ConfigError, WorldErrorCode.ConfigInvalid],
      [CheckpointError, WorldErrorCode.CheckpointInvalid],
      [TextEncoderError, WorldErrorCode.TextEncoder],
      [WorldInputInvalid, WorldErrorCode.InputInvalid],
      [WorldOutOfMemory, WorldErrorCode.OutOfMemory],
      [WorldConfigError, WorldErrorCode.AppConfigInvalid],
    ];
    for (const [Cls, code] of cases) {
      const e = new Cls('what happened');
      expect([e.code, e.name, e.message, e instanceof CodedError]).toEqual([code, Cls.name, 'what happened', true]);
    }
    expect(new Set(cases.map(([, c]) => c)).size).toBe(cases.length);
  });
});
