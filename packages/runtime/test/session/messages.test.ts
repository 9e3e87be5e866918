import { afterEach, describe, expect, it } from 'vitest';
import { ApplicationError, type Client, connected, InputState, ReactorApp, reactorApp, sessionStarted } from '../../src/index.js';
import { RecordingSink, useHosts } from '../../src/testing.js';

const start = useHosts(afterEach);

class BackendInfo {
  constructor(readonly backend: string) {}
}

/** The sample app's pattern: greet the session in @sessionStarted and each client in @connected. */
@reactorApp({ messages: [BackendInfo] })
class Greeter extends ReactorApp<InputState, InputState, unknown, BackendInfo> {
  override processInput(): never {
    throw new ApplicationError('idle');
  }
  generate(): null {
    return null;
  }
  @sessionStarted announce(): void {
    this.send(new BackendInfo('cpu'));
  }
  @connected greet(client: Client): void {
    client.send(new BackendInfo('cpu'));
  }
}

describe('app messages', () => {
  it('a @sessionStarted broadcast and a @connected greeting reach the first client once (backend_info)', async () => {
    const h = start(Greeter);
    await h.load();
    const first = new RecordingSink();
    h.connect(first);
    await first.waitForSession('streaming');
    const second = new RecordingSink();
    h.connect(second);
    await second.waitForMessage((m) => m.type === 'message');
    expect(first.ofType('message')).toEqual([{ type: 'message', name: 'backend_info', data: { backend: 'cpu' } }]);
    expect(second.ofType('message')).toEqual([{ type: 'message', name: 'backend_info', data: { backend: 'cpu' } }]);
  });
});
