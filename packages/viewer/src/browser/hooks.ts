/**
 * The viewer's state that tests and debugging read as `window.reactorViewer` (the live client,
 * counters, publications, players, the decode log, clips and recordings), and the loader of the
 * SDK's browser entry.
 */
import { type ReactorClient, type ClipResult, type RecordingInfo, type Publication } from '@reactor/client';
import type * as ClientBrowser from '@reactor/client/browser';
import type { AudioPlayer, VideoReceiver } from '@reactor/client/browser';

/** Exposed for tests and debugging: the live client and counters. */
export const viewer = {
  client: undefined as ReactorClient | undefined,
  framesDrawn: 0,
  lastSeq: -1,
  /** Live publications by inbound track name (camera, microphone). */
  publications: new Map<string, Publication>(),
  /** Audio players by outbound audio track name. */
  audioPlayers: new Map<string, AudioPlayer>(),
  /** Audio chunks received. */
  audioChunks: 0,
  /** Coded video (WebCodecs), when the server offers a codec this browser decodes; else undefined (JPEG as before). */
  video: undefined as VideoReceiver | undefined,
  /** Where the picture comes from now: the WebRTC link's `<video>` fills the status line then, not the WebSocket receiver. */
  media: 'websocket' as 'websocket' | 'webrtc',
  /** `performance.now()` when the server answered the first `select_video`. */
  videoSelectedAt: undefined as number | undefined,
  /** Every decoded picture drawn: seq, `performance.now()` at arrival and at decode, its encoding. */
  decodeLog: [] as { seq: number; receivedAt: number; decodedAt: number; encoding: number; key: boolean }[],
  /** Clips this page took (`client.clip()` answers). */
  clips: [] as ClipResult[],
  /** The last `GET /recordings` listing. */
  recordings: [] as RecordingInfo[],
  /** Loads the SDK's browser entry (`AudioPlayer`, `cameraFrames`, `microphoneChunks`). */
  browser: (): Promise<BrowserModule> => loadBrowser(),
};
(window as unknown as { reactorViewer: typeof viewer }).reactorViewer = viewer;

export type BrowserModule = typeof ClientBrowser;
let browserModule: Promise<BrowserModule> | undefined;
/** The SDK's DOM-only entry, served beside its main entry (the import map names only the main one). */
export function loadBrowser(): Promise<BrowserModule> {
  browserModule ??= import(new URL('client/browser.js', import.meta.url).href) as Promise<BrowserModule>;
  return browserModule;
}
