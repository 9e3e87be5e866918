// Type test (run by `pnpm typecheck`, not by vitest): a client typed with the types `reactor types`
// wrote for the sample app (test/fixtures/video-app-types.ts, kept equal to a fresh run by
// packages/cli/test/types.test.ts) refuses wrong commands, parameters and message fields.
import { connect, type ReactorClient } from '@reactor/client';
import { WebSocket } from 'ws';
import type { ReactorVideoTypes } from './fixtures/video-app-types.js';

export async function typedClientChecks(url: string): Promise<void> {
  const client: ReactorClient<ReactorVideoTypes> = await connect<ReactorVideoTypes>(url, { WebSocket });

  await client.command('set_prompt', { prompt: 'A beach at dusk.' });
  await client.command('set_paused', { paused: true }, { timeoutMs: 1000 });
  await client.command('reset');
  await client.command('reset', {});

  // @ts-expect-error a prompt is a string
  await client.command('set_prompt', { prompt: 1 });
  // @ts-expect-error set_prompt needs its params
  await client.command('set_prompt');
  // @ts-expect-error no such parameter
  await client.command('set_prompt', { prompt: 'x', seed: 3 });
  // @ts-expect-error no such command
  await client.command('set_speed', { speed: 2 });
  // @ts-expect-error reset takes no parameters
  await client.command('reset', { hard: true });

  client.onMessage('backend_info', (info) => {
    // Typed from the message class's declaration (it has no validators): a number, not unknown.
    const worldSize: number = info.world_size;
    void worldSize;
    // @ts-expect-error world_size is a number
    const asText: string = info.world_size;
    void asText;
    const backend: 'webgpu' | 'wasm' | 'cpu' | undefined = info.backends[0]?.backend;
    void backend;
    // @ts-expect-error message data travels under wire (snake_case) names
    void info.worldSize;
  });
  client.onMessage('runner_restarting', (m) => void m.reason);
  client.onMessage('image_set', (m) => {
    // @ts-expect-error name is null once the picture is cleared
    const name: string = m.name;
    void name;
  });
  // @ts-expect-error no such message
  client.onMessage('backend_infos', () => undefined);

  // The untyped client still takes any name (the escape hatch for apps without types).
  const loose = await connect(url, { WebSocket });
  await loose.command('anything', { at: 'all' });
  await loose.send('set_prompt', { prompt: 1 });
}
