/**
 * The link's connect window against a server that answers late: it waits its window for the
 * answer, then its window again from the answer, so a busy server's own reason (`rtc_state
 * failed`, sent when the server's window ends) is what the link reports.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { AppSchema, RtcAnswerMessage, RtcCandidateMessage, RtcClientMessage, RtcStateMessage } from '@reactor/protocol';
import { IllegalTransitionError, transition } from '@reactor/protocol';
import { RTC_LINK_TRANSITIONS, WebRtcLink, type RtcLinkClient, type RtcPeerConnectionLike } from '../src/rtc/rtc-link.js';

type Signal = RtcAnswerMessage | RtcCandidateMessage | RtcStateMessage;

/** Every FakePeer made, newest last (the browser's events are played on them). */
const peers: FakePeer[] = [];

class FakePeer implements RtcPeerConnectionLike {
  connectionState = 'new';
  onicecandidate = null;
  ontrack = null;
  onconnectionstatechange: (() => void) | null = null;
  constructor() {
    peers.push(this);
  }
  addTransceiver(): unknown {
    return {};
  }
  createOffer(): Promise<{ sdp: string; type: string }> {
    return Promise.resolve({ sdp: 'v=0\r\n', type: 'offer' });
  }
  setLocalDescription(): Promise<unknown> {
    return Promise.resolve();
  }
  setRemoteDescription(): Promise<unknown> {
    return Promise.resolve();
  }
  addIceCandidate(): Promise<unknown> {
    return Promise.resolve();
  }
  getStats(): Promise<{ forEach(cb: (s: Record<string, unknown>) => void): void }> {
    return Promise.resolve({ forEach: () => undefined });
  }
  close(): unknown {
    return undefined;
  }
}

/** A connected client whose server's window is 2000 ms (the link's: 3000 ms); `rtc()` plays the server's signals. */
function fakeClient(): { client: RtcLinkClient; sent: RtcClientMessage[]; rtc(m: Signal): void; welcome(): void } {
  const listeners = new Map<string, (m: never) => void>();
  const sent: RtcClientMessage[] = [];
  const schema = { tracks: [{ name: 'main', kind: 'video', direction: 'out' }] } as unknown as AppSchema;
  const client = {
    schema,
    webrtcSetup: { iceServers: [], iceTransportPolicy: 'all' as const, connectTimeoutMs: 2000 },
    on(type: string, listener: (m: never) => void) {
      listeners.set(type, listener);
      return () => undefined;
    },
    signal(msg: RtcClientMessage) {
      sent.push(msg);
    },
  } as RtcLinkClient;
  return {
    client,
    sent,
    rtc: (m) => (listeners.get('rtc') as (m: Signal) => void)(m),
    welcome: () => (listeners.get('welcome') as () => void)(),
  };
}

describe('WebRtcLink: the connect window', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("a server that answers late: the link waits its window again from the answer, and reports the server's reason", async () => {
    const { client, sent, rtc } = fakeClient();
    const link = WebRtcLink.start(client, { RTCPeerConnection: FakePeer });
    const failed = link.ready.then(
      () => 'connected',
      (err: Error) => err.message,
    );
    await vi.advanceTimersByTimeAsync(0);
    expect(sent.map((m) => m.type)).toEqual(['rtc_offer']);
    // The server took 1.5 s to answer (werift loading on a busy machine); its own 2 s window started before.
    await vi.advanceTimersByTimeAsync(1500);
    rtc({ type: 'rtc_answer', sdp: 'v=0\r\n', tracks: [] });
    // 3.4 s after the offer: past the link's 3 s from the offer, inside its 3 s from the answer.
    await vi.advanceTimersByTimeAsync(1900);
    expect(link.state).toBe('connecting');
    rtc({ type: 'rtc_state', state: 'failed', reason: 'rtc_ice_timeout: ICE and DTLS did not connect within 2000 ms' });
    expect(await failed).toBe('WebRTC failed: rtc_ice_timeout: ICE and DTLS did not connect within 2000 ms');
    expect(link.reason).toBe('WebRTC failed: rtc_ice_timeout: ICE and DTLS did not connect within 2000 ms');
  });

  it('a server that never answers: the link gives up after twice its window, saying no answer came', async () => {
    const { client } = fakeClient();
    const link = WebRtcLink.start(client, { RTCPeerConnection: FakePeer });
    const failed = link.ready.then(
      () => 'connected',
      (err: Error) => err.message,
    );
    await vi.advanceTimersByTimeAsync(5999);
    expect(link.state).toBe('connecting');
    await vi.advanceTimersByTimeAsync(1);
    expect(await failed).toBe('webrtc_failed: the server did not answer the WebRTC offer within 6000 ms; media stays on the WebSocket');
    expect(link.state).toBe('closed');
  });

  it("a server slow to answer whose own window ends first: its reason, even past the link's window", async () => {
    const { client, rtc } = fakeClient();
    const link = WebRtcLink.start(client, { RTCPeerConnection: FakePeer });
    const failed = link.ready.then(
      () => 'connected',
      (err: Error) => err.message,
    );
    // The server made its peer 1.6 s after the offer (loading werift on a busy machine): its 2 s window ends at 3.6 s, before any answer.
    await vi.advanceTimersByTimeAsync(3600);
    rtc({ type: 'rtc_state', state: 'failed', reason: 'rtc_ice_timeout: ICE and DTLS did not connect within 2000 ms' });
    expect(await failed).toBe('WebRTC failed: rtc_ice_timeout: ICE and DTLS did not connect within 2000 ms');
  });

  it('an answer and no connection: the link gives up its window after the answer, with what the browser heard', async () => {
    const { client, rtc } = fakeClient();
    const link = WebRtcLink.start(client, { RTCPeerConnection: FakePeer });
    const failed = link.ready.then(
      () => 'connected',
      (err: Error) => err.message,
    );
    await vi.advanceTimersByTimeAsync(200);
    rtc({ type: 'rtc_answer', sdp: 'v=0\r\n', tracks: [] });
    await vi.advanceTimersByTimeAsync(2999);
    expect(link.state).toBe('connecting');
    await vi.advanceTimersByTimeAsync(1);
    expect(await failed).toMatch(/^webrtc_failed: WebRTC did not connect within 3000 ms \(UDP blocked or no usable candidate\); media stays on the WebSocket$/);
  });
});

describe('WebRtcLink: its lifecycle on the transition table', () => {
  it('reaches connecting from every state (an offer after the WebSocket reconnected), and leaves failed only that way', () => {
    for (const from of Object.keys(RTC_LINK_TRANSITIONS) as (keyof typeof RTC_LINK_TRANSITIONS)[]) {
      if (from !== 'connecting') expect(RTC_LINK_TRANSITIONS[from]).toContain('connecting');
    }
    expect(RTC_LINK_TRANSITIONS.failed).toEqual(['connecting']);
    expect(() => transition('WebRtcLink', RTC_LINK_TRANSITIONS, 'failed', 'connected')).toThrow(IllegalTransitionError);
    expect(() => transition('WebRtcLink', RTC_LINK_TRANSITIONS, 'closed', 'failed')).toThrow('WebRtcLink: illegal state transition closed -> failed.');
  });

  it("the server closed its peer: the browser's later ICE failure is stale, and a reconnection offers again from closed", async () => {
    const { client, sent, rtc, welcome } = fakeClient();
    const link = WebRtcLink.start(client, { RTCPeerConnection: FakePeer });
    const states: string[] = [];
    link.on('state', (s) => states.push(s.state));
    await Promise.resolve();
    await Promise.resolve();
    rtc({ type: 'rtc_answer', sdp: 'v=0\r\n', tracks: [] });
    rtc({ type: 'rtc_state', state: 'connected' });
    await link.ready;
    const first = peers.at(-1)!;
    rtc({ type: 'rtc_state', state: 'closed', reason: 'the server closed it' });
    await vi.waitFor(() => expect(link.state).toBe('closed'));
    // Its ICE then fails in the browser: no edge closed -> failed, and no rtc_close for a peer the server already closed.
    first.connectionState = 'failed';
    first.onconnectionstatechange?.();
    expect(link.state).toBe('closed');
    expect(link.reason).toBeUndefined();
    expect(sent.filter((m) => m.type === 'rtc_close')).toEqual([]);
    // A new server connection: a new peer connection and offer, from closed.
    welcome();
    await vi.waitFor(() => expect(sent.filter((m) => m.type === 'rtc_offer')).toHaveLength(2));
    expect(peers.at(-1)).not.toBe(first);
    expect(states).toEqual(['connected', 'closed', 'connecting']);
    link.close();
    expect(states.at(-1)).toBe('closed');
  });
});
