import { describe, expect, it } from 'vitest';
import { toSnakeCase } from '../../src/internal.js';

describe('toSnakeCase', () => {
  it('gives the wire names of fields, tracks and message classes', () => {
    expect(['prompt', 'mainVideo', 'StateUpdate', 'HTTPStatus', 'guidance2Scale', 'already_snake', '_private'].map(toSnakeCase)).toEqual([
      'prompt',
      'main_video',
      'state_update',
      'http_status',
      'guidance2_scale',
      'already_snake',
      '_private',
    ]);
  });
});
