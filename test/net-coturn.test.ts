/**
 * The coturn the network tests use (scripts/net/coturn.mjs: Debian's `turnserver`, command line
 * only, one static user) relays for a real WebRTC client: Chromium in the viewer namespace of an
 * impaired link, coturn in the server namespace. Two relay-only peer connections in the page
 * exchange data-channel messages through it (the selected pair is relay on both ends), and a
 * wrong credential is refused (icecandidateerror 401, no relay candidate). No config file or
 * database is left behind.
 * Needs root (`ip netns`) and coturn (Debian `coturn`); CI runs as root. Skipped, with the reason
 * printed, only off Linux or without root.
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser, type Page } from 'playwright-core';
import { createImpairedLink, type ImpairedLink } from '../scripts/net/impaired-link.mjs';
import { startCoturn, type Coturn } from '../scripts/net/coturn.mjs';
import { chromiumOnLink } from '../scripts/net/playback.mjs';

const unavailable = process.platform !== 'linux' || process.getuid?.() !== 0 ? 'needs root on Linux (ip netns); CI runs as root' : undefined;
if (unavailable) console.warn(`coturn test skipped: ${unavailable}`);

let link: ImpairedLink;
let turn: Coturn;
let browser: Browser;
let page: Page;

describe.skipIf(unavailable !== undefined)('coturn relay-only ICE across the link', () => {
  beforeAll(async () => {
    link = await createImpairedLink({ rttMs: 40 });
    turn = await startCoturn({ ip: link.server.ip, spawn: (cmd, args, o) => link.spawn('server', cmd, args, o) });
    browser = await chromium.launch(chromiumOnLink(link, 'http://127.0.0.1'));
    page = await browser.newPage();
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await turn?.stop();
    await link?.close();
  });

  /** In the page: two relay-only peer connections through the TURN server; what they got. */
  const relayPair = (p: Page, server: { urls: string; username: string; credential: string }) =>
    p.evaluate(async (ice) => {
      const config: RTCConfiguration = { iceServers: [ice], iceTransportPolicy: 'relay' };
      const a = new RTCPeerConnection(config);
      const b = new RTCPeerConnection(config);
      const candidates: string[] = [];
      const errors: number[] = [];
      for (const [pc, other] of [
        [a, b],
        [b, a],
      ] as const) {
        pc.onicecandidate = (e) => {
          if (e.candidate) {
            candidates.push(e.candidate.candidate);
            void other.addIceCandidate(e.candidate);
          }
        };
        pc.onicecandidateerror = (e) => errors.push((e as RTCPeerConnectionIceErrorEvent).errorCode);
      }
      const channel = a.createDataChannel('probe');
      const echoed = new Promise<string>((resolve) => {
        b.ondatachannel = (e) => (e.channel.onmessage = (m) => resolve(String(m.data)));
      });
      await a.setLocalDescription(await a.createOffer());
      await b.setRemoteDescription(a.localDescription!);
      await b.setLocalDescription(await b.createAnswer());
      await a.setRemoteDescription(b.localDescription!);
      const opened = new Promise<boolean>((resolve) => {
        channel.onopen = () => resolve(true);
        setTimeout(() => resolve(false), 8000);
      });
      const open = await opened;
      let message: string | undefined;
      let pairTypes: string[] = [];
      if (open) {
        channel.send('through coturn');
        message = await echoed;
        const stats = await a.getStats();
        const byId = new Map<string, any>();
        stats.forEach((s) => byId.set(s.id, s));
        for (const s of byId.values()) {
          if (s.type === 'candidate-pair' && s.nominated && s.state === 'succeeded') {
            pairTypes = [byId.get(s.localCandidateId)?.candidateType, byId.get(s.remoteCandidateId)?.candidateType];
          }
        }
      }
      a.close();
      b.close();
      return { open, message, candidates, errors, pairTypes };
    }, server);

  it('relays a data channel between two relay-only peers: every candidate is a relay on the TURN address', async () => {
    const r = await relayPair(page, { urls: turn.urls, username: turn.username, credential: turn.credential });
    expect(r.open).toBe(true);
    expect(r.message).toBe('through coturn');
    expect(r.pairTypes).toEqual(['relay', 'relay']);
    expect(r.candidates.length).toBeGreaterThan(0);
    for (const c of r.candidates) expect(c).toMatch(new RegExp(` ${link.server.ip.replace(/\./g, '\\.')} \\d+ typ relay`));
  }, 30_000);

  it('refuses a wrong credential: icecandidateerror 401 and no candidate', async () => {
    const r = await relayPair(page, { urls: turn.urls, username: turn.username, credential: 'wrong' });
    expect(r.open).toBe(false);
    expect(r.candidates).toEqual([]);
    expect(r.errors).toContain(401);
  }, 30_000);

  it('leaves no database or pid file behind once stopped', async () => {
    const log = turn.log();
    const db = /SQLite DB connection success: (\S+)/.exec(log)?.[1];
    expect(db).toMatch(/reactor-coturn-/);
    await turn.stop();
    expect(existsSync(db!)).toBe(false);
  });
});
