/** The WebRTC transport's metrics, in the server's registry (`GET /metrics`). */
import { Counter, Gauge, type Registry } from 'prom-client';

/** Feedback a viewer's browser sends about its video (RTCP). */
export type RtcFeedbackKind = 'nack' | 'pli' | 'remb';

export class RtcMetrics {
  readonly peers: Gauge;
  readonly outcomes: Counter;
  readonly feedback: Counter;
  readonly feedbackDropped: Counter;
  readonly tierSwitches: Counter;
  readonly retransmits: Counter;
  readonly playoutDelayRaises: Counter;

  constructor(registry: Registry) {
    const registers = [registry];
    this.peers = new Gauge({ name: 'reactor_webrtc_peers', help: 'Open WebRTC peer connections (one per client that offered).', registers });
    this.outcomes = new Counter({
      name: 'reactor_webrtc_peer_outcomes_total',
      help: 'How WebRTC peer connections went: connected, failed (ICE timeout, peer lost, bad offer), closed (rtc_close or the client left).',
      labelNames: ['outcome'],
      registers,
    });
    this.feedback = new Counter({
      name: 'reactor_webrtc_feedback_total',
      help: 'RTCP feedback received from WebRTC viewers, by kind (nack, pli, remb).',
      labelNames: ['kind'],
      registers,
    });
    this.feedbackDropped = new Counter({
      name: 'reactor_webrtc_feedback_dropped_total',
      help: 'RTCP feedback ignored because a viewer sent more than its rate allows (a NACK or PLI flood), by kind.',
      labelNames: ['kind'],
      registers,
    });
    this.tierSwitches = new Counter({
      name: 'reactor_webrtc_tier_switches_total',
      help: 'Tier moves of WebRTC viewers made from their own congestion feedback (REMB, loss), by direction.',
      labelNames: ['direction'],
      registers,
    });
    this.retransmits = new Counter({
      name: 'reactor_webrtc_nack_packets_total',
      help: 'Packets WebRTC viewers asked for again (NACK), answered from the per-viewer packet cache when still there.',
      registers,
    });
    this.playoutDelayRaises = new Counter({
      name: 'reactor_webrtc_playout_delay_raises_total',
      help: "Times a WebRTC viewer's playout delay was raised off 0 because its NACKs showed a lossy path (back to 0 after a quiet spell).",
      registers,
    });
    for (const kind of ['nack', 'pli', 'remb'] satisfies RtcFeedbackKind[]) {
      this.feedback.inc({ kind }, 0);
      this.feedbackDropped.inc({ kind }, 0);
    }
  }
}
