import type { ChildProcess } from 'node:child_process';
import type { Page } from 'playwright-core';
import type { ImpairedLink } from './impaired-link.mjs';

export const NET_TOKEN: string;

export interface LinkServer {
  /** The viewer URL `reactor run` printed (token included). */
  url: string;
  child: ChildProcess;
  stderr(): string;
  stdout(): string;
  /** SIGTERM (SIGKILL after 5 s) and the temp folder removed. */
  stop(): Promise<void>;
}

/** `reactor run --manifest` of the pattern app in the link's server namespace; `serverYaml`: more `server:` lines. */
export function serveOnLink(link: ImpairedLink, options?: { serverYaml?: string[]; env?: Record<string, string> }): Promise<LinkServer>;

/** playwright `launch()` options: Chromium in the link's viewer namespace, `origin` treated as secure. */
export function chromiumOnLink(
  link: ImpairedLink,
  origin: string,
  extraArgs?: string[],
): { executablePath: string; env: Record<string, string | undefined>; args: string[] };

export function startMeter(page: Page): Promise<void>;

export interface Playback {
  source: 'video' | 'canvas';
  seconds: number;
  frames: number;
  fps: number;
  freezes: number;
  freezeSeconds: number;
  freezeSecondsPerMinute: number;
  maxGapMs: number;
}

export function measure(page: Page, ms: number): Promise<Playback>;

/** `serve()` of the pattern app in the link's server namespace with ServerOptions as JSON. */
export function serveOnLinkWith(link: ImpairedLink, options?: Record<string, unknown>, env?: Record<string, string>): Promise<LinkServer>;

export interface RtcClientState {
  state: string | undefined;
  reason: string | undefined;
  errors: string[];
  candidates: string[];
  binaryWhileConnected: number;
  binaryAfterEnd: number;
}

/** A raw WebRTC client in the page (the browser's RTCPeerConnection, recvonly video); state in `window.__rtc`. */
export function startRtcClient(page: Page, url: string, rtcConfig?: RTCConfiguration): Promise<void>;
