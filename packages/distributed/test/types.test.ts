import { describe, expect, expectTypeOf, it } from 'vitest';
import { DistributedRunner, DistributedWorker, type SharedResult } from '../src/index.js';

// Compile-time promises of the public types (pnpm typecheck fails when one breaks); the
// run-time part only checks that the classes line up.
interface In {
  prompt: string;
}
interface Out {
  frames: Uint8Array;
}
interface Args {
  weightsRoot: string;
}

class TypedWorker extends DistributedWorker<In, Out, Args> {
  static override moduleUrl = import.meta.url;
  load(_args: Args): void {}
  generate(_input: In): Out {
    return { frames: new Uint8Array(1) };
  }
  reset(): void {}
}

class NoUrlWorker extends DistributedWorker<In, Out, Args> {
  load(): void {}
  generate(): Out {
    return { frames: new Uint8Array(1) };
  }
  reset(): void {}
}

describe('public types', () => {
  it('use one generic order for the worker and the runner: <TInput, TResult, TArgs>', () => {
    const make = () => new DistributedRunner(TypedWorker, { worldSize: 1, loadArgs: { weightsRoot: '/w' } });
    expectTypeOf(make).returns.toEqualTypeOf<DistributedRunner<In, Out, Args>>();
    expectTypeOf<DistributedRunner<In, Out, Args>['generate']>().parameter(0).toEqualTypeOf<In>();
    // @ts-expect-error loadArgs has the worker's TArgs type
    const wrongArgs = () => new DistributedRunner(TypedWorker, { worldSize: 1, loadArgs: { weightsRoot: 1 } });
    // @ts-expect-error a runner typed in another order does not accept this worker
    const swapped = (): DistributedRunner<Args, Out, In> => new DistributedRunner(TypedWorker, { worldSize: 1 });
    expect([make, wrongArgs, swapped].every((f) => typeof f === 'function')).toBe(true);
  });

  it('require moduleUrl on the worker class', () => {
    // @ts-expect-error a worker class without `static moduleUrl` is refused by the types
    const refused = () => new DistributedRunner(NoUrlWorker, { worldSize: 1 });
    expect(typeof refused).toBe('function');
  });

  it('show the lifetime of a zero-copy result: generate() gives owned data, generateView() a SharedResult', () => {
    expectTypeOf<DistributedRunner<In, Out, Args>['generate']>().returns.toEqualTypeOf<Promise<Out>>();
    expectTypeOf<DistributedRunner<In, Out, Args>['generateView']>().returns.toEqualTypeOf<Promise<SharedResult<Out>>>();
    expectTypeOf<SharedResult<Out>['valid']>().toEqualTypeOf<boolean>();
    expectTypeOf<SharedResult<Out>['copy']>().returns.toEqualTypeOf<Out>();
  });
});
