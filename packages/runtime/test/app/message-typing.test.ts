/**
 * The type rules of messages and events. The compile-time half is checked by `pnpm typecheck`
 * (which covers this folder): each `@ts-expect-error` line must be an error, or the check fails.
 */
import { IsInt, IsString } from 'class-validator';
import { describe, expect, it } from 'vitest';
import { type Client, connected, event, InputField, InputState, MessageNotDeclaredError, ReactorApp, reactorApp } from '../../src/index.js';
import { describeApp } from '../../src/internal.js';

class Notice {
  constructor(readonly text: string) {}
}
class Progress {
  constructor(
    readonly done: number,
    readonly total: number,
  ) {}
}
class Stray {
  constructor(readonly whatever: boolean) {}
}
class JumpParams {
  @InputField({ description: 'Frame index.' })
  @IsInt()
  frame!: number;
}
class SayParams {
  @InputField({ description: 'Text.' })
  @IsString()
  words!: string;
}

class Typed {
  @IsString() title: string;
  constructor(
    title: string,
    readonly pageCount: number,
  ) {
    this.title = title;
  }
}
class Derived extends Typed {
  constructor(readonly extra: boolean) {
    super('t', 1);
  }
}

describe('message schemas', () => {
  it('list the fields the constructor assigns, typed where a constraint says how, base class first', () => {
    @reactorApp({ messages: [Typed, Derived] })
    class A extends ReactorApp<InputState, InputState, unknown, Typed> {
      generate(): null {
        return null;
      }
    }
    expect(describeApp(A).schema.messages).toEqual([
      { name: 'typed', schema: { type: 'object', properties: { title: { type: 'string' }, page_count: {} }, required: ['title'] } },
      { name: 'derived', schema: { type: 'object', properties: { title: { type: 'string' }, page_count: {}, extra: {} }, required: ['title'] } },
    ]);
  });
});

describe('message and event types', () => {
  it('send() takes only the declared message classes; @reactorApp must list each; @event handlers take their params class', () => {
    @reactorApp({ messages: [Notice, Progress] })
    class Good extends ReactorApp<InputState, InputState, unknown, Notice | Progress> {
      generate(): null {
        this.send(new Notice('hi'));
        this.send(new Progress(1, 2));
        // @ts-expect-error -- Stray is not one of the app's message types
        this.send(new Stray(true));
        // @ts-expect-error -- nor is a plain object
        this.send({ text: 'hi', extra: 1 });
        return null;
      }
      @event({ params: JumpParams })
      jump(params: JumpParams, client: Client<Notice | Progress>): number {
        client.send(new Notice(`to ${params.frame}`));
        // @ts-expect-error -- a Client<Notice | Progress> sends only those
        client.send(new Stray(false));
        return params.frame;
      }
      // @ts-expect-error -- the handler takes SayParams, the event declares JumpParams
      @event({ params: JumpParams })
      say(params: SayParams): string {
        return params.words;
      }
      @connected hello(client: Client<Notice>): void {
        client.send(new Notice('welcome'));
      }
    }

    // @ts-expect-error -- Progress is a message type of the app but not listed in messages
    @reactorApp({ messages: [Notice] })
    class Unlisted extends ReactorApp<InputState, InputState, unknown, Notice | Progress> {
      generate(): null {
        return null;
      }
    }

    class Silent extends ReactorApp {
      generate(): null {
        // @ts-expect-error -- an app that declares no message types sends none
        this.send(new Notice('x'));
        return null;
      }
    }

    expect(describeApp(Good).schema.messages).toEqual([
      { name: 'notice', schema: { type: 'object', properties: { text: {} } } },
      { name: 'progress', schema: { type: 'object', properties: { done: {}, total: {} } } },
    ]);
    expect(describeApp(Unlisted).schema.messages.map((m) => m.name)).toEqual(['notice']);
    expect(describeApp(Silent).schema.messages).toEqual([]);
    // The run-time check stays for JavaScript callers and casts.
    expect(MessageNotDeclaredError.name).toBe('MessageNotDeclaredError');
  });
});
