import { describe, expect, it } from 'vitest';
import { Audio, DecoratorMisuseError, event, Input, InputField, Output, ReactorApp, reactorApp, sessionStarted, Video } from '../../src/index.js';

function misuse(fn: () => void): DecoratorMisuseError {
  try {
    fn();
  } catch (e) {
    if (e instanceof DecoratorMisuseError) return e;
    throw e;
  }
  throw new Error('expected a DecoratorMisuseError');
}

describe('decorators', () => {
  it('@event refuses a field or a static method when applied', () => {
    class A {
      static s(): void {}
    }
    // @ts-expect-error -- a value that is not a method: refused at compile time, and at run time
    expect(misuse(() => event()(A.prototype, 'x', { value: 1 })).message).toMatchInlineSnapshot(`"@event decorates methods; A.x is not one"`);
    expect(misuse(() => event()(A, 's', Object.getOwnPropertyDescriptor(A, 's')!)).code).toBe('decorator_misuse');
  });

  it('a hook applied twice to one method is an error at decoration', () => {
    class A {
      m(): void {}
    }
    const d = Object.getOwnPropertyDescriptor(A.prototype, 'm')!;
    sessionStarted(A.prototype, 'm', d);
    expect(misuse(() => sessionStarted(A.prototype, 'm', d)).message).toMatchInlineSnapshot(`"@sessionStarted applied twice to A.m"`);
  });

  it('@InputField refuses static members and double application', () => {
    class A {}
    expect(misuse(() => InputField()(A, 'x')).message).toMatchInlineSnapshot(`"@InputField cannot decorate static member A.x"`);
    InputField()(A.prototype, 'y');
    expect(misuse(() => InputField()(A.prototype, 'y')).message).toMatchInlineSnapshot(`"@InputField applied twice to A.y"`);
  });

  it('@Video and @Audio only declare tracks on Output or Input subclasses', () => {
    class NotOutput {}
    expect(misuse(() => Video()(NotOutput.prototype, 'main')).message).toMatchInlineSnapshot(
      `"@Video declares tracks on Output or Input subclasses; NotOutput extends neither"`,
    );
    expect(misuse(() => Audio()(NotOutput.prototype, 'mic')).message).toMatchInlineSnapshot(
      `"@Audio declares tracks on Output or Input subclasses; NotOutput extends neither"`,
    );
    class Ok extends Output {}
    expect(() => Video()(Ok.prototype, 'main')).not.toThrow();
    expect(() => Audio()(Ok.prototype, 'sound')).not.toThrow();
    class In extends Input {}
    expect(() => Video()(In.prototype, 'webcam')).not.toThrow();
    expect(() => Audio()(In.prototype, 'mic')).not.toThrow();
  });

  it('@reactorApp cannot be applied twice', () => {
    class A extends ReactorApp {
      generate(): null {
        return null;
      }
    }
    reactorApp({})(A);
    expect(misuse(() => reactorApp({})(A)).message).toMatchInlineSnapshot(`"@reactorApp applied twice to A"`);
  });
});
