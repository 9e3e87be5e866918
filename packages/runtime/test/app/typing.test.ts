import { IsBoolean, IsString } from 'class-validator';
import { describe, expect, it } from 'vitest';
import { InputField, InputState, ReactorApp, reactorApp } from '../../src/index.js';
import { describeApp } from '../../src/internal.js';

class PromptState extends InputState {
  @InputField({ default: 'a' })
  @IsString()
  prompt!: string;
}
class PausedState extends InputState {
  @InputField({ default: false })
  @IsBoolean()
  paused!: boolean;
}

describe('@reactorApp typing', () => {
  // The compile-time half is checked by `pnpm typecheck` (an unused @ts-expect-error fails it).
  it('accepts the state class the app is typed with and rejects another at compile time', () => {
    @reactorApp({ state: PromptState })
    class Good extends ReactorApp<PromptState> {
      generate(): string {
        return this.state.prompt; // typed
      }
    }
    // @ts-expect-error -- the app is typed ReactorApp<PromptState> but declares PausedState
    @reactorApp({ state: PausedState })
    class Bad extends ReactorApp<PromptState> {
      generate(): null {
        return null;
      }
    }
    expect(describeApp(Good).schema.commands.map((c) => c.name)).toEqual(['set_prompt']);
    expect(describeApp(Bad).schema.commands.map((c) => c.name)).toEqual(['set_paused']);
  });
});
