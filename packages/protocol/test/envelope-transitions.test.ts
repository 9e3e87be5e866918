import { describe, expect, it } from 'vitest';
import {
  CodedError,
  HttpErrorCode,
  IllegalTransitionError,
  ProtocolErrorCode,
  canTransition,
  encodeHttpError,
  httpErrorEnvelope,
  parseHttpError,
  readHttpError,
  transition,
  type TransitionTable,
} from '../src/index.js';

describe('HTTP error envelope', () => {
  it('writes {"error":{"code","message"}} byte for byte', () => {
    expect(encodeHttpError(HttpErrorCode.NotFound, 'no such route')).toBe('{"error":{"code":"not_found","message":"no such route"}}');
    expect(JSON.stringify({ ...httpErrorEnvelope('queue_full', 'full'), retryAfterS: 3 })).toBe(
      '{"error":{"code":"queue_full","message":"full"},"retryAfterS":3}',
    );
  });

  it('reads back what it writes', () => {
    expect(parseHttpError(encodeHttpError('unauthorized', 'present the token'))).toEqual({ code: 'unauthorized', message: 'present the token' });
    expect(readHttpError(JSON.parse(encodeHttpError('bad_wait', 'w')))).toEqual({ code: 'bad_wait', message: 'w' });
  });

  it('reads nothing from a body that is not an envelope, and leaves out fields of the wrong type', () => {
    for (const text of ['', 'not json', '[]', 'null', '{"ok":true}', '{"error":"x"}']) expect(parseHttpError(text), text).toBeUndefined();
    expect(readHttpError(undefined)).toBeUndefined();
    expect(readHttpError({ error: { code: 5, message: 'm' } })).toEqual({ message: 'm' });
  });
});

type Light = 'red' | 'green' | 'amber' | 'off';
const TABLE: TransitionTable<Light> = { red: ['green', 'off'], green: ['amber', 'off'], amber: ['red', 'off'], off: [] };

describe('transition helper', () => {
  it('takes every edge of its table and refuses every other with IllegalTransitionError', () => {
    const states = Object.keys(TABLE) as Light[];
    let refused = 0;
    for (const from of states) {
      for (const to of states) {
        if (TABLE[from].includes(to)) {
          expect(canTransition(TABLE, from, to)).toBe(true);
          expect(transition('light', TABLE, from, to)).toBe(to);
        } else {
          expect(canTransition(TABLE, from, to)).toBe(false);
          expect(() => transition('light', TABLE, from, to), `${from} -> ${to}`).toThrow(IllegalTransitionError);
          refused++;
        }
      }
    }
    expect(refused).toBe(16 - 6);
  });

  it('names the machine and both states, in its words or the caller’s', () => {
    const caught = (f: () => unknown): unknown => {
      try {
        f();
      } catch (e) {
        return e;
      }
      return undefined;
    };
    const err = caught(() => transition('Light(1)', TABLE, 'off', 'red'));
    expect(err).toBeInstanceOf(CodedError);
    expect(err).toMatchObject({
      name: 'IllegalTransitionError',
      code: ProtocolErrorCode.IllegalTransition,
      machine: 'Light(1)',
      lifecycle: 'Light(1)',
      from: 'off',
      to: 'red',
      message: 'Light(1): illegal state transition off -> red.',
    });
    const worded = caught(() => transition('light', TABLE, 'red', 'amber', (m, f, t) => `illegal ${m} transition ${f} -> ${t}`));
    expect((worded as Error).message).toBe('illegal light transition red -> amber');
    // The lifecycle alias is a getter: a serialised error carries the fields once.
    expect(Object.keys(err as object).sort()).toEqual(['code', 'from', 'machine', 'name', 'to']);
  });
});

describe('CodedError', () => {
  it('carries code, message, cause and the subclass name', () => {
    class PlugError extends CodedError {}
    const cause = new Error('root');
    const e = new PlugError('plug_failed', 'the plug failed', { cause });
    expect(e).toBeInstanceOf(Error);
    expect({ name: e.name, code: e.code, message: e.message, cause: e.cause }).toEqual({
      name: 'PlugError',
      code: 'plug_failed',
      message: 'the plug failed',
      cause,
    });
  });
});
