/**
 * `@reactor/client/browser`: the DOM-only parts of the SDK. The main entry (`@reactor/client`)
 * publishes a `MediaStreamTrack` by itself; this entry adds the audio player and the capture
 * generators for those who drive them directly.
 */
export { AudioPlayer } from './audio-player.js';
export type { AudioPlayerOptions } from './audio-player.js';
export { cameraFrames, microphoneChunks, PCM_WORKLETS_URL } from './media-capture.js';
export type { CameraCaptureOptions, MicrophoneCaptureOptions } from './media-capture.js';
