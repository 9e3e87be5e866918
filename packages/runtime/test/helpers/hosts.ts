/** Test hosts that close themselves after each test, and a command builder. */
import { afterEach } from 'vitest';
import { AppHost, type ReactorApp } from '../../src/index.js';
import { RecordingLogger } from './recording-sink.js';

/**
 * Registers an `afterEach` that closes every host made by the returned `start()`. Stats are off
 * and logs go to a {@link RecordingLogger} unless `opts` says otherwise.
 */
export function useHosts(): (app: new () => ReactorApp<any, any, any>, opts?: ConstructorParameters<typeof AppHost>[1]) => AppHost {
  const hosts: AppHost[] = [];
  afterEach(async () => {
    await Promise.all(hosts.splice(0).map((h) => h.close()));
  });
  return (app, opts = {}) => {
    const h = new AppHost(app, { statsIntervalMs: 0, logger: new RecordingLogger(), ...opts });
    hosts.push(h);
    return h;
  };
}

/** A command message as a transport hands it to the host. */
export const cmd = (id: string, name: string, params?: unknown) => ({
  type: 'command' as const,
  id,
  name,
  ...(params !== undefined ? { params: params as Record<string, unknown> } : {}),
});
