import type { ChildProcess, SpawnOptions } from 'node:child_process';

export interface Coturn {
  child: ChildProcess;
  /** `turn:<ip>:<port>?transport=udp` */
  urls: string;
  /** `turn:<ip>:<port>?transport=tcp` */
  urlsTcp: string;
  username: string;
  credential: string;
  log(): string;
  stop(): Promise<void>;
}

export function startCoturn(options: {
  ip: string;
  port?: number;
  user?: string;
  password?: string;
  realm?: string;
  minPort?: number;
  maxPort?: number;
  /** coturn's `static-auth-secret` (`use-auth-secret`): credentials minted from it, no static user. */
  authSecret?: string;
  spawn?: (command: string, args: string[], options: SpawnOptions) => ChildProcess;
}): Promise<Coturn>;
