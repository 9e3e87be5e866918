import { afterEach, describe, expect, it } from 'vitest';
import { HostOptionError, type LoadContext, ReactorApp } from '../../src/index.js';
import { RecordingLogger, useHosts } from '../../src/testing.js';

const start = useHosts(afterEach);

/** An app that keeps the context its load() was given and logs through it. */
function contextApp(): { App: new () => ReactorApp; seen: LoadContext[]; sameLogger: boolean[] } {
  const seen: LoadContext[] = [];
  const sameLogger: boolean[] = [];
  class ContextApp extends ReactorApp {
    override load(context: LoadContext): void {
      seen.push(context);
      sameLogger.push(context.logger === this.logger);
      context.logger.child({ part: 'model' }).info('loaded');
    }
    generate(): null {
      return null;
    }
  }
  return { App: ContextApp, seen, sameLogger };
}

describe('AppHost.load(options)', () => {
  it("hands the app a LoadContext: the config path, the manifest's GPU count and the app's logger (this.logger)", async () => {
    const { App, seen, sameLogger } = contextApp();
    const logger = new RecordingLogger();
    const host = start(App, { logger });
    await host.load({ configPath: '/etc/app.yaml', manifestGpuCount: 2 });
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({ configPath: '/etc/app.yaml', manifestGpuCount: 2 });
    expect(sameLogger).toEqual([true]);
    expect(logger.lines).toContainEqual(expect.objectContaining({ level: 'info', message: 'loaded', fields: { app: 'ContextApp', part: 'model' } }));
  });

  it('leaves both undefined when nothing is given (not started from a manifest)', async () => {
    const { App, seen } = contextApp();
    await start(App).load();
    expect(seen[0]).toMatchObject({ configPath: undefined, manifestGpuCount: undefined });
  });

  it('refuses a manifestGpuCount that is not a non-negative integer, naming it, before load() runs', async () => {
    const { App, seen } = contextApp();
    const host = start(App);
    const err = await host.load({ manifestGpuCount: -1 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(HostOptionError);
    expect((err as HostOptionError).message).toBe('load() options.manifestGpuCount must be a non-negative integer, got -1');
    expect(seen).toHaveLength(0);
    expect(host.status.state).toBe('loading');
  });
});
