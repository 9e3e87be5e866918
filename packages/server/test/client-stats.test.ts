import { describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { connect, type ErrorMessage, type WelcomeMessage } from '@reactor/client';
import { until } from '@reactor/test-kit';
import { RawClient } from './fixtures/net.js';
import { usePatternServers } from './pattern-servers.js';

const { start, cleanups } = usePatternServers();

async function client(url: string): Promise<RawClient> {
  const c = await new RawClient(url).open();
  cleanups.push(() => c.close());
  return c;
}

function wsUrl(url: string): string {
  return url.replace(/^http/, 'ws') + '/ws';
}

async function metrics(url: string): Promise<string> {
  return (await fetch(`${url}/metrics`)).text();
}

/** The lines of the client-measured metrics (what a refused report must leave as they were). */
function clientFigures(text: string): string[] {
  return text.split('\n').filter((l) => /^reactor_(command_to_pixel|time_to_first_frame|client_freeze|client_frames_dropped)/.test(l));
}

const report = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  type: 'client_stats',
  transport: 'websocket',
  samples: [],
  freezes: 0,
  freezeMs: 0,
  dropped: 0,
  ...extra,
});

/** Sends a report and waits for its refusal. */
async function refused(c: RawClient, body: unknown): Promise<ErrorMessage> {
  const before = c.texts.length;
  c.send(body);
  return c.waitFor<ErrorMessage>((m) => m.type === 'error' && c.texts.indexOf(m) >= before && m.code === 'invalid_client_stats');
}

describe('client_stats', () => {
  it('is offered in the welcome and counted into the per-command and per-transport metrics', async () => {
    const server = await start();
    const c = await client(wsUrl(server.url));
    const welcome = c.texts.find((m) => m.type === 'welcome') as WelcomeMessage;
    expect(welcome.clientStats).toEqual({ intervalMs: 1000 });
    await until(() => c.binaries.length >= 3, 'frames', 10_000);
    expect(await c.command('1', 'set_speed', { speed: 3 })).toMatchObject({ type: 'reply' });
    expect(await c.command('2', 'set_speed', { speed: 4 })).toMatchObject({ type: 'reply' });
    c.send(
      report({
        samples: [
          { command: 'set_speed', ms: 42 },
          { command: 'set_speed', ms: 180 },
        ],
        firstFrameMs: 250,
        freezes: 1,
        freezeMs: 300,
        dropped: 1,
        fps: 29.5,
      }),
    );
    await until(async () => /reactor_client_stats_reports_total\{outcome="accepted"\} 1/.test(await metrics(server.url)), 'the report counted', 5000);
    const text = await metrics(server.url);
    expect(text).toMatch(/reactor_command_to_pixel_seconds_count\{command="set_speed",transport="websocket"\} 2/);
    expect(text).toMatch(/reactor_command_to_pixel_seconds_sum\{command="set_speed",transport="websocket"\} 0\.222/);
    expect(text).toMatch(/reactor_command_to_pixel_seconds_bucket\{le="0\.05",command="set_speed",transport="websocket"\} 1/);
    expect(text).toMatch(/reactor_time_to_first_frame_seconds_count\{transport="websocket"\} 1/);
    expect(text).toMatch(/reactor_client_freezes_total\{transport="websocket"\} 1/);
    expect(text).toMatch(/reactor_client_freeze_seconds_total\{transport="websocket"\} 0\.3/);
    expect(text).toMatch(/reactor_client_frames_dropped_total\{transport="websocket"\} 1/);
    // Nothing was refused: no error came back.
    expect(c.texts.filter((m) => m.type === 'error')).toEqual([]);
  });

  it('refuses garbage with invalid_client_stats and counts nothing of it', async () => {
    const server = await start();
    const warm = await client(wsUrl(server.url));
    await until(() => warm.binaries.length >= 2, 'frames', 10_000);
    const figures = clientFigures(await metrics(server.url));
    const many = Array.from({ length: 65 }, () => ({ command: 'set_speed', ms: 10 }));
    const cases: [body: unknown, says: RegExp][] = [
      [report({ transport: 'carrier-pigeon' }), /"transport" must be "websocket" or "webrtc"/],
      [report({ samples: many }), /65 samples in one report; at most 64/],
      [report({ samples: [{ command: 'set_speed', ms: -1 }] }), /samples\[0\]: "ms" must be a number of ms from 0 to 120000/],
      [report({ samples: [{ command: 'set_speed', ms: 1e9 }] }), /from 0 to 120000/],
      [report({ samples: [{ command: 'set_speed', ms: '5' }] }), /"ms" must be a number/],
      [report({ samples: [{ command: 'set_speed', ms: 5, extra: 1 }] }), /a sample has only "command" and "ms"/],
      [report({ freezes: 1.5 }), /"freezes" must be a whole number/],
      [report({ freezeMs: 50 }), /"freezeMs" is over 0 with no freeze counted/],
      [report({ fps: Number.MAX_VALUE }), /"fps" must be a number from 0 to 1000/],
      [report({ bogus: true }), /unknown key\(s\) "bogus"/],
      [report({ samples: [{ command: 'no_such_command', ms: 5 }] }), /"no_such_command", which is not a command of this app/],
      // No command was sent on this connection: it has no sample to report.
      [report({ samples: [{ command: 'set_speed', ms: 5 }] }), /more samples of "set_speed" than this connection sent/],
      [report({ dropped: 1_000_000 }), /more dropped frames \(1000000 in all\) than the server sent this connection/],
      [report({ freezes: 1, freezeMs: 599_000 }), /more freeze time/],
      [report({ freezes: 100, freezeMs: 1 }), /more freezes \(100 in all\) than gaps of 200 ms fit/],
    ];
    for (const [body, says] of cases) {
      // A fresh connection each: the rate bound (2 a second) must not be what refuses it.
      const c = await client(wsUrl(server.url));
      const err = await refused(c, body);
      expect(err.message, JSON.stringify(body).slice(0, 120)).toMatch(says);
      expect(err.message).toMatch(/^client_stats refused, nothing of it counted: /);
      expect(err.id).toBeUndefined();
      c.close();
    }
    expect(clientFigures(await metrics(server.url))).toEqual(figures);
    expect(await metrics(server.url)).toMatch(new RegExp(`reactor_client_stats_reports_total\\{outcome="refused"\\} ${cases.length}`));
    // Refused reports are not command results.
    expect(await metrics(server.url)).not.toMatch(/reactor_command_results_total\{code="invalid_client_stats"\}/);
  });

  it('bounds each client: one sample per replied command, 2 reports a second, one first frame per connection', async () => {
    const server = await start();
    const c = await client(wsUrl(server.url));
    await until(() => c.binaries.length >= 2, 'frames', 10_000);
    expect(await c.command('1', 'set_speed', { speed: 5 })).toMatchObject({ type: 'reply' });
    // Two samples for one command: the whole report is refused, even its good sample.
    let err = await refused(
      c,
      report({
        samples: [
          { command: 'set_speed', ms: 30 },
          { command: 'set_speed', ms: 30 },
        ],
      }),
    );
    expect(err.message).toMatch(/more samples of "set_speed" than this connection sent such commands and got their reply \(1 not yet reported\)/);
    expect(await metrics(server.url)).not.toMatch(/reactor_command_to_pixel_seconds_count/);
    // That refusal used one of the second's two reports; the next one is counted.
    c.send(report({ samples: [{ command: 'set_speed', ms: 30 }], firstFrameMs: 100 }));
    err = await refused(c, report({ freezes: 0 }));
    expect(err.message).toMatch(/more than 2 reports in one second/);
    const text = await metrics(server.url);
    expect(text).toMatch(/reactor_command_to_pixel_seconds_count\{command="set_speed",transport="websocket"\} 1/);
    expect(text).toMatch(/reactor_time_to_first_frame_seconds_count\{transport="websocket"\} 1/);
    // A second later: the credit is spent and the first frame was reported.
    await new Promise((r) => setTimeout(r, 1050));
    err = await refused(c, report({ samples: [{ command: 'set_speed', ms: 30 }] }));
    expect(err.message).toMatch(/more samples of "set_speed"/);
    err = await refused(c, report({ firstFrameMs: 120 }));
    expect(err.message).toMatch(/firstFrameMs was already reported on this connection/);
    const after = await metrics(server.url);
    expect(after).toMatch(/reactor_command_to_pixel_seconds_count\{command="set_speed",transport="websocket"\} 1/);
    expect(after).toMatch(/reactor_time_to_first_frame_seconds_count\{transport="websocket"\} 1/);
    // The connection stays open and keeps working.
    expect(await c.command('2', 'set_speed', { speed: 6 })).toMatchObject({ type: 'reply' });
  });

  it('does not take a sample of a command that failed', async () => {
    const server = await start();
    const c = await client(wsUrl(server.url));
    expect(await c.command('1', 'set_speed', { speed: 99 })).toMatchObject({ type: 'error', code: 'invalid_params' });
    const err = await refused(c, report({ samples: [{ command: 'set_speed', ms: 30 }] }));
    expect(err.message).toMatch(/\(0 not yet reported\)/);
  });

  it('is sent by @reactor/client by itself (time to first frame), and not with stats: false', async () => {
    const server = await start();
    const [on, off] = await Promise.all([
      connect(server.url, { WebSocket, reconnect: false }),
      connect(server.url, { WebSocket, reconnect: false, stats: false }),
    ]);
    cleanups.push(
      () => on.close(),
      () => off.close(),
    );
    expect(on.latency).toBeDefined();
    expect(off.latency).toBeUndefined();
    await until(async () => /reactor_time_to_first_frame_seconds_count\{transport="websocket"\} 1/.test(await metrics(server.url)), 'the first report', 5000);
    expect(on.latency!.summary().firstFrameMs).toBeGreaterThan(0);
    // A report interval later, the client with stats off has still sent none.
    await new Promise((r) => setTimeout(r, 1300));
    const text = await metrics(server.url);
    expect(text).toMatch(/reactor_time_to_first_frame_seconds_count\{transport="websocket"\} 1\n/);
    expect(text).toMatch(/reactor_client_stats_reports_total\{outcome="refused"\} 0/);
  });

  it('@reactor/client samples send -> delivery of the applied frame, and the sample reaches /metrics', async () => {
    const server = await start();
    const client = await connect(server.url, { WebSocket, reconnect: false });
    cleanups.push(() => client.close());
    const delivered = new Map<number, { track: string; at: number }>();
    // The frame's own delivery stamp, the one the tracker reads: a clock read here, a listener later,
    // can be a few ms after it when the OS preempts the process between the two (issue 43: a sample
    // 4.8 ms below such a reading was that, not a clock bug).
    client.on('frame', (f) => delivered.set(f.seq, { track: f.trackName, at: f.receivedAt }));
    await until(() => delivered.size >= 3, 'frames', 10_000);
    const before = performance.now();
    const p = client.send('set_speed', { speed: 7 });
    const after = performance.now();
    await p;
    const info = await p.applied;
    expect(info.outcome).toBe('applied');
    if (info.outcome !== 'applied') return;
    await until(() => client.latency!.summary().samples === 1, 'the sample', 10_000);
    // The first frame of the applied frame's track at or after its seq.
    await until(() => [...delivered].some(([seq, d]) => seq >= info.seq && d.track === info.track), 'the applied frame', 5000);
    const [, shown] = [...delivered].filter(([seq, d]) => seq >= info.seq && d.track === info.track).sort((a, b) => a[0] - b[0])[0]!;
    const ms = client.latency!.summary().lastMs!;
    expect(ms).toBeGreaterThanOrEqual(shown.at - after);
    expect(ms).toBeLessThanOrEqual(shown.at - before);
    await until(
      async () => /reactor_command_to_pixel_seconds_count\{command="set_speed",transport="websocket"\} 1/.test(await metrics(server.url)),
      'the sample in /metrics',
      5000,
    );
  });
});
