/**
 * `ServerOptions.webrtc`'s ICE settings for clients: `clientIceServers` (default: the server's
 * own `iceServers`), `turnSecret` and `turnCredentialTtlS` (coturn's `use-auth-secret`, the TURN
 * REST API): what each bad value is called, and the credentials minted (a fixed vector, checked
 * with `openssl dgst -sha1 -hmac s3cret -binary | base64`).
 */
import { describe, expect, it } from 'vitest';
import { resolveWebRtcOptions, type WebRtcOptions } from '../src/webrtc/rtc-options.js';
import { iceServersFor, mintTurnCredential } from '../src/webrtc/turn-credentials.js';

const TURN = 'turn:turn.example.com:3478';
const problem = (o: WebRtcOptions): string => {
  try {
    resolveWebRtcOptions(o);
  } catch (err) {
    return (err as Error).message;
  }
  return 'accepted';
};

describe('resolveWebRtcOptions: ICE servers for clients', () => {
  it("gives clients the server's own servers by default, clientIceServers when set", () => {
    const own = [{ urls: 'stun:stun.example.com:3478' }];
    expect(resolveWebRtcOptions({ iceServers: own }).clientIceServers).toEqual(own);
    const theirs = [{ urls: 'turn:public.example.com:3478', username: 'u', credential: 'p' }];
    const r = resolveWebRtcOptions({ iceServers: own, clientIceServers: theirs });
    expect(r.clientIceServers).toEqual(theirs);
    expect(r.iceServers).toEqual(own);
    expect(r.turn).toBeUndefined();
    expect(resolveWebRtcOptions({ iceServers: [{ urls: TURN }], turnSecret: 's' }).turn).toEqual({ secret: 's', ttlS: 86_400 });
  });

  it('names each bad value', () => {
    expect(problem({ iceServers: [{ urls: TURN }] })).toMatchInlineSnapshot(
      `"options.webrtc.iceServers[0] is a TURN server: it needs a username and a credential, or options.webrtc.turnSecret (coturn's static-auth-secret) to mint them"`,
    );
    expect(problem({ clientIceServers: [{ urls: TURN, username: 'u' }] })).toMatchInlineSnapshot(
      `"options.webrtc.clientIceServers[0] has a username alone: give both, or neither to mint them from options.webrtc.turnSecret"`,
    );
    expect(problem({ clientIceServers: [{ urls: 'http://turn.example.com' }] })).toMatchInlineSnapshot(
      `"options.webrtc.clientIceServers[0].urls must be stun:, stuns:, turn: or turns: URLs, got "http://turn.example.com""`,
    );
    expect(problem({ clientIceServers: 'turn:x' as never })).toMatch(/^options\.webrtc\.clientIceServers must be an array/);
    expect(problem({ iceServers: [{ urls: TURN }], turnSecret: '' })).toMatchInlineSnapshot(
      `"options.webrtc.turnSecret must be a non-empty string (coturn's static-auth-secret), got an empty string"`,
    );
    expect(problem({ iceServers: [{ urls: TURN, username: 'u', credential: 'p' }], turnSecret: 's' })).toMatchInlineSnapshot(
      `"options.webrtc.turnSecret is set but no TURN server takes it: write a TURN server without username and credential in options.webrtc.iceServers or options.webrtc.clientIceServers"`,
    );
    expect(problem({ iceServers: [{ urls: TURN }], turnSecret: 's', turnCredentialTtlS: 10 })).toMatchInlineSnapshot(
      `"options.webrtc.turnCredentialTtlS must be an integer from 60 to 2592000 (seconds), got 10"`,
    );
    expect(problem({ turnCredentialTtlS: 600 })).toMatchInlineSnapshot(
      `"options.webrtc.turnCredentialTtlS is set without options.webrtc.turnSecret: only minted TURN credentials expire"`,
    );
    expect(
      problem({ iceServers: [{ urls: TURN, username: 'u', credential: 'p' }], clientIceServers: [{ urls: 'stun:s:3478' }], iceTransportPolicy: 'relay' }),
    ).toMatchInlineSnapshot(
      `"options.webrtc.iceTransportPolicy "relay" needs a TURN server in options.webrtc.clientIceServers too: clients get the same policy"`,
    );
  });
});

describe('TURN REST API credentials', () => {
  it('mints username <expiry>:<id> and base64(HMAC-SHA1(secret, username))', () => {
    expect(mintTurnCredential('s3cret', 'c1', 3600, Date.parse('2026-01-01T00:00:00Z'))).toEqual({
      username: '1767229200:c1',
      credential: 'RY3YdlfevNT7+SL7JWNt6JXsxXU=',
    });
  });

  it('mints only for TURN servers written without credentials, and only with a secret', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    const list = [{ urls: 'stun:s:3478' }, { urls: [TURN] }, { urls: 'turns:t:5349', username: 'static', credential: 'pw' }];
    expect(iceServersFor(list, { secret: 's3cret', ttlS: 3600 }, 'c1', now)).toEqual([
      { urls: 'stun:s:3478' },
      { urls: [TURN], username: '1767229200:c1', credential: 'RY3YdlfevNT7+SL7JWNt6JXsxXU=' },
      { urls: 'turns:t:5349', username: 'static', credential: 'pw' },
    ]);
    expect(iceServersFor(list, undefined, 'c1', now)).toEqual(list);
  });
});
