import type { ChildProcess, SpawnOptions } from 'node:child_process';

export type Side = 'server' | 'viewer' | 'router';

export interface ImpairedLinkOptions {
  /** Round trip the userspace hop adds, ms (half each way). */
  rttMs?: number;
  /** Rate cap each way (tbf), kbit/s; none: uncapped. */
  rateKbit?: number;
  /** Drop probability each way, 0..1 (iptables statistic). */
  loss?: number;
  /** The bottleneck's buffer (tbf latency), ms; default 80. */
  queueMs?: number;
}

export interface ImpairedLink {
  readonly server: { readonly ns: string; readonly ip: string };
  readonly viewer: { readonly ns: string; readonly ip: string };
  readonly router: { readonly ns: string };
  readonly loss: number;
  readonly udpBlocked: boolean;
  readonly closed: boolean;
  /** Changes the drop probability each way (0: none). */
  setLoss(p: number): void;
  /** Drops every UDP packet between the sides (on) or stops (off). */
  blockUdp(on: boolean): void;
  /** Spawns a command inside a side's namespace; killed by close(). */
  spawn(side: Side, command: string, args: string[], options?: SpawnOptions): ChildProcess;
  /** Runs a command inside a side's namespace; its stdout; throws on a non-zero exit. */
  exec(side: Side, command: string, ...args: string[]): string;
  /** Kills what runs in the namespaces and deletes them; the delay hop's counts when it had one. */
  close(): Promise<{ forwarded: number; dropped: number } | undefined>;
  closeSync(): void;
}

export interface LinkProbe {
  pingsSent: number;
  pingsReceived: number;
  rttP50Ms: number;
  rttMinMs: number;
  tcpKbit?: number;
}

/** Why an impaired link cannot be made here (not Linux, not root, a tool missing), or undefined. */
export function impairedLinkUnavailable(): string | undefined;
export function createImpairedLink(options?: ImpairedLinkOptions): Promise<ImpairedLink>;
export function probeLink(link: ImpairedLink, options?: { pings?: number; tcpBytes?: number }): Promise<LinkProbe>;
