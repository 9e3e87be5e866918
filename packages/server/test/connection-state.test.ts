import { describe, expect, it } from 'vitest';
import { IllegalTransitionError } from '@reactor/protocol';
import { CONNECTION_TRANSITIONS, ConnectionLifecycle, type ConnectionState } from '../src/ws/connection-state.js';

describe('the connection state table', () => {
  it('starts open, pauses and resumes reads, and keeps the pause across a server close', () => {
    const s = new ConnectionLifecycle();
    expect(s.state).toBe('open');
    expect(s.resumable).toBe(true);
    s.pauseReads();
    expect(s.state).toBe('reads_paused');
    expect(s.readsPaused).toBe(true);
    s.closeByServer();
    expect(s.state).toBe('closing_reads_paused');
    expect(s.readsPaused).toBe(true);
    expect(s.resumable).toBe(false);
    s.resumeReads();
    expect(s.state).toBe('closing');
    expect(s.readsPaused).toBe(false);
    expect(s.deaf).toBe(false);
  });

  it('cut and evicted connections read nothing, are not held for resume, and only close', () => {
    const s = new ConnectionLifecycle();
    s.to('cut');
    expect(s.deaf).toBe(true);
    expect(s.resumable).toBe(false);
    s.closeByServer(); // nothing changes once cut
    expect(s.state).toBe('cut');
    s.to('evicted');
    expect(s.evicted).toBe(true);
    s.to('closed');
    expect(s.closed).toBe(true);
    expect(CONNECTION_TRANSITIONS.closed).toEqual([]);
  });

  it('throws IllegalTransitionError naming both states for an edge the table lacks', () => {
    const s = new ConnectionLifecycle();
    s.to('closed');
    expect(() => s.to('open')).toThrow(IllegalTransitionError);
    expect(() => s.to('open')).toThrow('connection: illegal state transition closed -> open.');
    const e = new ConnectionLifecycle();
    e.to('evicted');
    expect(() => e.pauseReads()).toThrow('connection: illegal state transition evicted -> reads_paused.');
    expect(e.state).toBe('evicted');
  });

  it('lets every state but closed reach closed', () => {
    for (const state of Object.keys(CONNECTION_TRANSITIONS) as ConnectionState[]) {
      if (state !== 'closed') expect(CONNECTION_TRANSITIONS[state]).toContain('closed');
    }
  });
});
