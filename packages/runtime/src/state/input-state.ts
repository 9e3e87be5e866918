/**
 * Base class of an app's session state. Declare fields with `@InputField` plus class-validator
 * constraints; public fields become `set_<field>` commands, `_`-prefixed fields are private
 * session scratch. A fresh instance is built from the defaults when a session starts.
 *
 * @example
 * export class VideoState extends InputState {
 *   @InputField({ default: false, description: 'Pause the video.' }) @IsBoolean()
 *   paused!: boolean;
 * }
 */
export class InputState {}
