import { describe, expect, it } from 'vitest';
import { parseClientMessage } from '../src/ws/client-message.js';

describe('parseClientMessage', () => {
  it('accepts a command and each track message with its own envelope', () => {
    expect(parseClientMessage('{"type":"command","id":"1","name":"set_x","params":{"x":1}}')).toEqual({
      ok: true,
      message: { type: 'command', id: '1', name: 'set_x', params: { x: 1 } },
    });
    for (const type of ['publish', 'unpublish', 'pause_track', 'resume_track']) {
      expect(parseClientMessage(JSON.stringify({ type, id: 'a', track: 'cam' }))).toEqual({ ok: true, message: { type, id: 'a', track: 'cam' } });
    }
  });

  it('refuses a track message without a track, or with a key it does not have, naming the fix', () => {
    expect(parseClientMessage('{"type":"pause_track","id":"p"}')).toEqual({
      ok: false,
      code: 'malformed_message',
      id: 'p',
      message: 'a pause_track message needs a "track": the name of a track in schema.tracks',
    });
    expect(parseClientMessage('{"type":"resume_track","id":"r","track":"v","name":"x"}')).toMatchObject({
      ok: false,
      code: 'malformed_message',
      id: 'r',
      message: 'unknown key(s) "name" in resume_track; a resume_track has only type, id and track',
    });
  });

  it('names every accepted type when the type is unknown', () => {
    expect(parseClientMessage('{"type":"subscribe","id":"s"}')).toEqual({
      ok: false,
      code: 'unknown_message_type',
      id: 's',
      message:
        'unknown message type "subscribe"; clients send "command", "publish", "unpublish", "pause_track", "resume_track", "select_video", "request_key_frame", "clip", "recording", "request_control", "release_control", "client_stats", "rtc_offer", "rtc_candidate", "rtc_close"',
    });
  });

  it('reads select_video (codec, optional tier) and request_key_frame (track, no id)', () => {
    expect(parseClientMessage('{"type":"select_video","id":"v","codec":"h264","tier":"half"}')).toEqual({
      ok: true,
      message: { type: 'select_video', id: 'v', codec: 'h264', tier: 'half' },
    });
    expect(parseClientMessage('{"type":"request_key_frame","track":"main"}')).toEqual({ ok: true, message: { type: 'request_key_frame', track: 'main' } });
    expect(parseClientMessage('{"type":"select_video","id":"v"}')).toMatchObject({ ok: false, code: 'malformed_message', id: 'v' });
    expect(parseClientMessage('{"type":"request_key_frame","track":"main","id":"x"}')).toMatchObject({ ok: false, code: 'malformed_message' });
  });
});
