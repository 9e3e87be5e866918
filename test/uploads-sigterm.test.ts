/**
 * Uploads under a real `reactor run`: a child process serving the sample app, a client in a
 * session, an upload half sent, then SIGTERM. The process exits 0 and leaves no upload folder in
 * its temporary directory (TMPDIR) and no process behind.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import { request } from 'node:http';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { connect, type UploadTicket } from '@reactor/client';
import { alive, descendants } from './fixtures/processes.js';
import { sampleWorkspace } from './fixtures/sample-workspace.js';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(repo, 'packages/cli/dist/main.js');

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Every file under `dir` (recursively). */
function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((e) => {
    const p = join(dir, e);
    return statSync(p).isDirectory() ? filesUnder(p).map((f) => join(e, f)) : [e];
  });
}

const uploadFolders = (tmp: string): string[] => readdirSync(tmp).filter((e) => e.startsWith('reactor-uploads-'));

/** Starts `reactor run` on the workspace; resolves with the child and its base URL once the viewer line is out. */
async function run(dir: string, tmp: string): Promise<{ child: ReturnType<typeof spawn>; url: string; stderr: () => string }> {
  const child = spawn(process.execPath, [cli, 'run', '--manifest', join(dir, 'reactor.yaml')], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, TMPDIR: tmp },
  });
  cleanups.push(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const base = await new Promise<string>((res, rej) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /Viewer: (\S+)/.exec(out);
      if (m) res(m[1]!);
    });
    child.once('exit', (code) => rej(new Error(`reactor run exited with ${code}:\n${stderr}`)));
  });
  return { child, url: base.replace(/\/$/, ''), stderr: () => stderr };
}

describe('uploads under reactor run', () => {
  it("SIGKILL with a stored upload: the next reactor run removes the dead server's folder, with the user's file, when it starts", async () => {
    const dir = sampleWorkspace({
      prefix: 'reactor-upl-kill-',
      config: 'width: 32\nheight: 32\nframesPerChunk: 4\nrolloutChunks: 1000\nworldSize: 1\ndevices: cpu\nbackend: wasm\n',
      server: '{ port: 0 }',
    });
    const tmp = join(dir, 'tmp');
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    mkdirSync(tmp);
    const first = await run(dir, tmp);
    const client = await connect(first.url, { WebSocket, reconnect: false });
    cleanups.push(() => client.close());
    await new Promise<void>((res) => (client.session.state === 'streaming' ? res() : client.on('session', (s) => s.state === 'streaming' && res())));
    const png = Buffer.alloc(10_000, 3);
    png.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    await client.upload(new Uint8Array(png), { name: 'mine.png' });
    expect(uploadFolders(tmp).flatMap((f) => filesUnder(join(tmp, f)))).toHaveLength(1);
    const ranks = descendants(first.child.pid!);
    first.child.kill('SIGKILL');
    await once(first.child, 'exit');
    client.close();
    for (const pid of ranks) {
      try {
        process.kill(pid, 'SIGKILL'); // the ranks of the killed server (it could not stop them)
      } catch {
        // already gone
      }
    }
    for (const pid of ranks) await expect.poll(() => alive(pid), { timeout: 10_000 }).toBe(false);
    // The killed server could not clean up: its folder and the user's file are still there.
    expect(uploadFolders(tmp)).toHaveLength(1);
    // A new server, with no client and no upload yet: the folder is gone once it listens.
    const second = await run(dir, tmp);
    expect(uploadFolders(tmp), second.stderr()).toEqual([]);
    second.child.kill('SIGTERM');
    await once(second.child, 'exit');
    // Two servers started one after the other, each loading its app and rank: 30 s each on a busy 2-core machine.
  }, 60_000);

  it('SIGTERM mid-upload: the process exits 0, with no upload folder and no process left behind', async () => {
    const dir = sampleWorkspace({
      prefix: 'reactor-upl-run-',
      config: 'width: 32\nheight: 32\nframesPerChunk: 4\nrolloutChunks: 1000\nworldSize: 1\ndevices: cpu\nbackend: wasm\n',
      server: '{ port: 0, max_upload_bytes: 20000000, upload_quota_bytes: 40000000 }',
    });
    const tmp = join(dir, 'tmp');
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    mkdirSync(tmp);
    const child = spawn(process.execPath, [cli, 'run', '--manifest', join(dir, 'reactor.yaml')], {
      cwd: dir,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, TMPDIR: tmp },
    });
    cleanups.push(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const base = await new Promise<string>((res, rej) => {
      let out = '';
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /Viewer: (\S+)/.exec(out);
        if (m) res(m[1]!);
      });
      child.once('exit', (code) => rej(new Error(`reactor run exited with ${code}:\n${stderr}`)));
    });
    const url = base.replace(/\/$/, '');
    const client = await connect(url, { WebSocket, reconnect: false });
    cleanups.push(() => client.close());
    await new Promise<void>((res) => (client.session.state === 'streaming' ? res() : client.on('session', (s) => s.state === 'streaming' && res())));

    // A 10 MB upload, announced by this client; half of it sent, then the server is stopped.
    const size = 10_000_000;
    // A picture (the sample app's one upload field takes images): a file no field takes is refused from its first bytes.
    const post = await fetch(`${url}/uploads`, { method: 'POST', body: JSON.stringify({ name: 'big.png', size, clientId: client.clientId }) });
    expect(post.status).toBe(201);
    const ticket = (await post.json()) as UploadTicket;
    const put = request(`${url}${ticket.url}`, { method: 'PUT', headers: { 'content-length': String(size) } });
    const answered = new Promise<string>((res) => {
      put.on('response', (r) => res(`status ${r.statusCode}`));
      put.on('error', (e) => res(`error ${e.message}`));
    });
    const chunk = Buffer.alloc(1_000_000, 1);
    chunk.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    put.write(chunk);
    for (let i = 1; i < 5; i++) put.write(Buffer.alloc(1_000_000, i));
    // Wait until the server has stored some of it in the session's folder.
    await expect.poll(() => uploadFolders(tmp).flatMap((f) => filesUnder(join(tmp, f))).length, { timeout: 20_000 }).toBe(1);
    const ranks = descendants(child.pid!);
    child.kill('SIGTERM');
    const [code] = (await once(child, 'exit')) as [number | null];
    expect(code, stderr).toBe(0);
    expect(await answered).not.toBe('status 200');
    expect(uploadFolders(tmp)).toEqual([]);
    for (const pid of ranks) await expect.poll(() => alive(pid), { timeout: 10_000 }).toBe(false);
  });
});
