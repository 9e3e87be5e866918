import { describe, expect, it } from 'vitest';
import { ProtocolError } from '../src/index.js';
import { expectChildMessage, expectParentMessage, isChildMessage, isParentMessage } from '../src/protocol.js';

describe('protocol', () => {
  it('recognises each side’s messages', () => {
    expect(isParentMessage({ t: 'call', id: 1, op: 'generate', input: null })).toBe(true);
    expect(isParentMessage({ t: 'result', id: 1, value: null })).toBe(false);
    expect(isChildMessage({ t: 'result', id: 1, value: null })).toBe(true);
    expect(isChildMessage('loaded')).toBe(false);
  });

  it('turns an unknown message into a named error', () => {
    const err = (() => {
      try {
        expectChildMessage({ t: 'hello', x: 1 }, 2);
      } catch (e) {
        return e as ProtocolError;
      }
      return null;
    })();
    expect(err).toBeInstanceOf(ProtocolError);
    expect(err!.code).toBe('ipc_protocol');
    expect(err!.message).toMatchInlineSnapshot(`"Parent received an unknown message from rank 2: {"t":"hello","x":1}."`);
    expect(() => expectParentMessage(null)).toThrowErrorMatchingInlineSnapshot(`[ProtocolError: Rank received an unknown message from the parent: null.]`);
  });
});
