/**
 * Module hooks of `reactor dev`'s app process (registered with `module.register`): a module under
 * the app's package (not under node_modules) imported by a module loaded as `x.js?reactor-dev=N`
 * is loaded as generation N too. So importing the app as generation N+1 evaluates the app's own
 * modules again (the edits are seen) while the framework and every dependency stay one copy.
 */
import type { InitializeHook, ResolveHook } from 'node:module';
import { pathToFileURL } from 'node:url';

/** The query parameter that names a generation. */
export const GENERATION_PARAM = 'reactor-dev';

let root = '';

/** `data.root`: the app package's folder. */
export const initialize: InitializeHook<{ root: string }> = (data) => {
  root = pathToFileURL(data.root).href.replace(/\/?$/, '/');
};

export const resolve: ResolveHook = async (specifier, context, next) => {
  const resolved = await next(specifier, context);
  const parent = context.parentURL;
  if (!parent || !root || !resolved.url.startsWith(root) || resolved.url.includes('/node_modules/')) return resolved;
  const generation = new URL(parent).searchParams.get(GENERATION_PARAM);
  const url = new URL(resolved.url);
  if (generation === null || url.search !== '') return resolved;
  url.searchParams.set(GENERATION_PARAM, generation);
  return { ...resolved, url: url.href };
};
