/**
 * `@reactor/client/browser`: the DOM-only parts of the SDK. The main entry (`@reactor/client`)
 * publishes a `MediaStreamTrack` by itself; this entry adds the audio player, the capture
 * generators for those who drive them directly, and coded video (WebCodecs): a decoder per track,
 * the receiver that picks a codec and a tier for a connection, and their pure policies; the
 * presentation times of a `<video>` element for the latency tracker.
 */
export { AudioPlayer } from './media/audio-player.js';
export type { AudioPlayerOptions } from './media/audio-player.js';
export { cameraFrames, microphoneChunks, PCM_WORKLETS_URL } from './media/media-capture.js';
export type { CameraCaptureOptions, MicrophoneCaptureOptions } from './media/media-capture.js';
export { VideoTrackDecoder, pickVideoCodec, hasWebCodecs, PROBE_CODEC_STRINGS } from './video/video-decoder.js';
export type { DecodedVideoInfo, VideoInputFrame, VideoTrackDecoderEvents, VideoTrackDecoderOptions, VideoDecoderCounters } from './video/video-decoder.js';
export { VideoReceiver } from './video/video-receiver.js';
export { trackVideoElement } from './latency/video-element-presentation.js';
export { LatencyTracker } from './latency/latency-tracker.js';
export type { VideoElementPresentationOptions } from './latency/video-element-presentation.js';
export type { VideoReceiverClient, VideoReceiverOptions, VideoReceiverEvents } from './video/video-receiver.js';
export { KeyFrameGate } from './video/key-frame-gate.js';
export type { ReferenceLoss, GateDecision, GateFrame, KeyFrameGateOptions } from './video/key-frame-gate.js';
export { TierController } from './video/tier-controller.js';
export type { TierControllerOptions, TierDecision, TierWindow } from './video/tier-controller.js';
