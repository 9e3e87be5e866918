import { describe, expect, it } from 'vitest';
import { CLIENT_MESSAGE_TYPES, MAX_COMMAND_ID_LENGTH, WireErrorCode, parseClientMessage, parseServerMessage, validId } from '../src/index.js';

describe('parseClientMessage', () => {
  it('accepts each message type in its envelope', () => {
    expect(parseClientMessage('{"type":"command","id":"1","name":"reset","params":{"a":1}}')).toEqual({
      ok: true,
      message: { type: 'command', id: '1', name: 'reset', params: { a: 1 } },
    });
    expect(parseClientMessage('{"type":"request_key_frame","track":"main"}')).toEqual({ ok: true, message: { type: 'request_key_frame', track: 'main' } });
    expect(parseClientMessage('{"type":"select_video","id":"2","codec":"h264","tier":"half"}')).toEqual({
      ok: true,
      message: { type: 'select_video', id: '2', codec: 'h264', tier: 'half' },
    });
    expect(parseClientMessage('{"type":"release_control","id":"3"}')).toEqual({ ok: true, message: { type: 'release_control', id: '3' } });
  });

  it.each([
    ['not an object', '[1,2]', WireErrorCode.MalformedMessage, /not a JSON object/, undefined],
    ['invalid JSON', '{"type":', WireErrorCode.MalformedMessage, /not valid JSON/, undefined],
    ['no string type', '{"type":3}', WireErrorCode.MalformedMessage, /string "type"/, undefined],
    ['an unknown type', '{"type":"hello","id":"7"}', WireErrorCode.UnknownMessageType, /unknown message type "hello"/, '7'],
    ['a command without id', '{"type":"command","name":"x"}', WireErrorCode.MalformedMessage, /needs an "id"/, undefined],
    ['a command without name', '{"type":"command","id":"1"}', WireErrorCode.MalformedMessage, /needs a "name"/, '1'],
    ['an unknown key', '{"type":"publish","id":"1","track":"cam","extra":1}', WireErrorCode.MalformedMessage, /unknown key\(s\) "extra" in publish/, '1'],
    ['a prototype key', '{"type":"publish","id":"1","track":"cam","constructor":1}', WireErrorCode.MalformedMessage, /"constructor"/, '1'],
    [
      'a publish with an unknown transport',
      '{"type":"publish","id":"1","track":"cam","transport":"udp"}',
      WireErrorCode.MalformedMessage,
      /"websocket" .* or "webrtc"/,
      '1',
    ],
    ['a webrtc publish without mid', '{"type":"publish","id":"1","track":"cam","transport":"webrtc"}', WireErrorCode.MalformedMessage, /needs a "mid"/, '1'],
    [
      'a webrtc publish with an empty mid',
      '{"type":"publish","id":"1","track":"cam","transport":"webrtc","mid":""}',
      WireErrorCode.MalformedMessage,
      /needs a "mid"/,
      '1',
    ],
    [
      'a mid without webrtc',
      '{"type":"publish","id":"1","track":"cam","mid":"0"}',
      WireErrorCode.MalformedMessage,
      /"mid" only with "transport":"webrtc"/,
      '1',
    ],
    ['a bad recording action', '{"type":"recording","id":"1","action":"pause"}', WireErrorCode.MalformedMessage, /"start" or "stop"/, '1'],
  ])('refuses %s', (_what, text, code, message, id) => {
    const r = parseClientMessage(text);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.code).toBe(code);
    expect(r.message).toMatch(message);
    expect(r.id).toBe(id);
  });

  it('reads a publish over WebRTC: transport and mid', () => {
    expect(parseClientMessage('{"type":"publish","id":"p","track":"cam","transport":"webrtc","mid":"1"}')).toEqual({
      ok: true,
      message: { type: 'publish', id: 'p', track: 'cam', transport: 'webrtc', mid: '1' },
    });
    expect(parseClientMessage('{"type":"publish","id":"p","track":"cam","transport":"websocket"}')).toEqual({
      ok: true,
      message: { type: 'publish', id: 'p', track: 'cam', transport: 'websocket' },
    });
    expect(parseClientMessage('{"type":"publish","id":"p","track":"cam"}')).toEqual({ ok: true, message: { type: 'publish', id: 'p', track: 'cam' } });
  });

  it('names every client type in an unknown-type refusal', () => {
    const r = parseClientMessage('{"type":"nope"}');
    expect(r.ok || r.message).toContain(CLIENT_MESSAGE_TYPES.map((t) => `"${t}"`).join(', '));
  });

  it('takes ids of at most 64 code points', () => {
    expect(validId('😀'.repeat(MAX_COMMAND_ID_LENGTH))).toBe('😀'.repeat(MAX_COMMAND_ID_LENGTH));
    expect(validId('a'.repeat(MAX_COMMAND_ID_LENGTH + 1))).toBeUndefined();
    expect(validId('')).toBeUndefined();
    expect(validId(5)).toBeUndefined();
  });
});

describe('parseServerMessage', () => {
  it('returns a server message as it is', () => {
    expect(parseServerMessage('{"type":"flush","nextSeq":4}')).toEqual({ type: 'flush', nextSeq: 4 });
  });

  it.each([['"text"'], ['null'], ['{"kind":"x"}'], ['{"type":1}']])('refuses %s with a TypeError', (text) => {
    expect(() => parseServerMessage(text)).toThrow(new TypeError('server message is not a JSON object with a string "type"'));
  });

  it('refuses text that is not JSON', () => {
    expect(() => parseServerMessage('{')).toThrow(SyntaxError);
  });

  it('takes the four applied outcomes, seq and track only with applied', () => {
    expect(parseServerMessage('{"type":"applied","id":"7","outcome":"applied","seq":12,"track":"main_video"}')).toEqual({
      type: 'applied',
      id: '7',
      outcome: 'applied',
      seq: 12,
      track: 'main_video',
    });
    for (const outcome of ['superseded', 'paused', 'ended']) {
      expect(parseServerMessage(JSON.stringify({ type: 'applied', id: '7', outcome }))).toEqual({ type: 'applied', id: '7', outcome });
    }
  });

  it.each([
    ['{"type":"applied","outcome":"ended"}', '"id" must be a non-empty string'],
    ['{"type":"applied","id":"1","outcome":"done"}', '"outcome" must be one of applied, superseded, paused, ended, got "done"'],
    ['{"type":"applied","id":"1","outcome":"applied","track":"v"}', '"seq" must be a non-negative integer'],
    ['{"type":"applied","id":"1","outcome":"applied","seq":-1,"track":"v"}', '"seq" must be a non-negative integer'],
    ['{"type":"applied","id":"1","outcome":"applied","seq":1.5,"track":"v"}', '"seq" must be a non-negative integer'],
    ['{"type":"applied","id":"1","outcome":"applied","seq":1}', '"track" must be a non-empty string'],
    ['{"type":"applied","id":"1","outcome":"ended","seq":1}', 'outcome ended carries no "seq", "track" or "rtpTimestamp"'],
    ['{"type":"applied","id":"1","outcome":"ended","rtpTimestamp":1}', 'outcome ended carries no "seq", "track" or "rtpTimestamp"'],
    ['{"type":"applied","id":"1","outcome":"applied","seq":1,"track":"v","rtpTimestamp":4294967296}', '"rtpTimestamp" must be a 32-bit unsigned integer'],
    ['{"type":"applied","id":"1","outcome":"applied","seq":1,"track":"v","rtpTimestamp":"9"}', '"rtpTimestamp" must be a 32-bit unsigned integer'],
  ])('refuses the applied message %s', (text, why) => {
    expect(() => parseServerMessage(text)).toThrow(new TypeError(`applied message: ${why}`));
  });
});
