import { describe, expect, it } from 'vitest';
import type { WelcomeMessage } from '@reactor/client';
import { ask, useInputServers } from './input-servers.js';

const { start, client } = useInputServers();

describe('server: publish and unpublish messages', () => {
  it('routes publish/unpublish to the host: the first publisher wins, a second gets publish_refused, unpublish frees the track', async () => {
    const { server } = await start();
    const a = await client(server);
    const b = await client(server);
    expect(await ask(a, 'publish', 'p1', 'webcam')).toEqual({ type: 'reply', id: 'p1' });
    const holder = (a.texts.find((m) => m.type === 'welcome') as WelcomeMessage).clientId;
    expect(await ask(b, 'publish', 'p2', 'webcam')).toMatchObject({
      type: 'error',
      id: 'p2',
      code: 'publish_refused',
      message: expect.stringContaining(holder),
    });
    expect(await ask(b, 'unpublish', 'u1', 'webcam')).toMatchObject({ type: 'error', id: 'u1', code: 'not_publisher' });
    expect(await ask(a, 'unpublish', 'u2', 'webcam')).toEqual({ type: 'reply', id: 'u2' });
    expect(await ask(b, 'publish', 'p3', 'webcam')).toEqual({ type: 'reply', id: 'p3' });
    // Another track is independent.
    expect(await ask(a, 'publish', 'p4', 'mic')).toEqual({ type: 'reply', id: 'p4' });
  });

  it('answers unknown_track and wrong_track_direction from the host, with the id', async () => {
    const { server } = await start();
    const a = await client(server);
    expect(await ask(a, 'publish', 'x', 'nope')).toMatchObject({
      type: 'error',
      id: 'x',
      code: 'unknown_track',
      message: expect.stringContaining('webcam, mic'),
    });
    expect(await ask(a, 'publish', 'y', 'main_video')).toMatchObject({ type: 'error', id: 'y', code: 'wrong_track_direction' });
    expect(await ask(a, 'unpublish', 'z', 'main_video')).toMatchObject({ type: 'error', id: 'z', code: 'wrong_track_direction' });
  });

  it('refuses malformed publish messages with malformed_message (and the id when it has one); the connection stays usable', async () => {
    const { server } = await start();
    const a = await client(server);
    const answer = (id: string): Promise<unknown> => a.waitFor((m) => m.type === 'error' && m.id === id);
    a.send({ type: 'publish', id: 'm1' });
    expect(await answer('m1')).toMatchObject({
      code: 'malformed_message',
      message: 'a publish message needs a "track": the name of a track in schema.tracks',
    });
    a.send({ type: 'unpublish', id: 'm2', track: 7 });
    expect(await answer('m2')).toMatchObject({ code: 'malformed_message' });
    a.send({ type: 'publish', id: 'm3', track: 'webcam', name: 'x' });
    expect(await answer('m3')).toMatchObject({
      code: 'malformed_message',
      message: 'unknown key(s) "name" in publish; a publish has only type, id, track, transport and mid',
    });
    a.send({ type: 'publish', track: 'webcam' });
    await a.waitFor((m) => m.type === 'error' && m.id === undefined && m.message.includes('publish message needs an "id"'));
    expect(await ask(a, 'publish', 'ok', 'webcam')).toEqual({ type: 'reply', id: 'ok' });
  });

  it('sends every answer in the order the messages came, commands and publishes alike', async () => {
    const { server } = await start();
    const a = await client(server);
    a.send({ type: 'command', id: 'c1', name: 'no_such_command' });
    a.send({ type: 'publish', id: 'p1', track: 'webcam' });
    a.send({ type: 'command', id: 'c2', name: 'no_such_command' });
    a.send({ type: 'publish', id: 'p2', track: 'webcam' });
    a.send({ type: 'unpublish', id: 'p3', track: 'webcam' });
    await a.waitFor((m) => m.type === 'reply' && m.id === 'p3');
    const answers = a.texts
      .filter((m) => m.type === 'reply' || m.type === 'error')
      .map((m) => `${(m as { id: string }).id}:${m.type === 'error' ? m.code : 'ok'}`);
    expect(answers).toEqual(['c1:unknown_command', 'p1:ok', 'c2:unknown_command', 'p2:publish_refused', 'p3:ok']);
  });
});
