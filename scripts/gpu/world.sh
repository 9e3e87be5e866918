#!/usr/bin/env bash
# The world app on a GPU host (issue 35), in one command of about 8 minutes: unpack the offline
# bundle (BUNDLE_SKIP=codec,enhance scripts/bundle/make.sh .bundle/world.tar.xz), print the
# machine, then
#   1. the model alone (python3 -m reactor_world.bench): wan-1.3b at 832x480, chunk time at each
#      fill of the KV cache, eager and torch.compile; Self-Forcing's own 21-frame window; wan-14b;
#   2. the whole serving path (scripts/gpu/world.mjs: `reactor run` in a child process, a client
#      in another): model-only and delivered fps in one run, time to first frame, command-to-pixel
#      of prompt switches, GPU memory; eager, then compiled;
#   3. with WORLD_PARTS=...,pipeline (issue 39; scripts/gpu/world-pipeline.mjs): chunks a second of
#      the plain wan-1.3b and of a 2-rank pipeline of each shape (blocks split, steps split) whose
#      stages share GPU 0, and whether their latents equal the plain model's. Needs a bundle built
#      from a tree with issue 39 (runner protocol 5); an older one is named in world.jsonl;
#   4. with WORLD_PARTS=...,urgent (issue 39): the serving path twice, the prompt urgent (a switch
#      restarts the chunk in flight; the default) and not (`urgent: false`): command-to-pixel p50/p99
#      and delivered fps of each, in one run.
# One JSON object per line in $OUT/world.jsonl; progress in $OUT/world.err; the machine in
# $OUT/world-env.txt.
#   WORLD_CPU=1 REACTOR_PYTHON=/usr/bin/python3 bash scripts/gpu/world.sh   rehearsal without a GPU
#   WORLD_FROM_TREE=1 ...                                                   the built checkout, no bundle
set -u
repo=$(pwd)
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
cpu=${WORLD_CPU:-0}
if [ "${WORLD_FROM_TREE:-0}" = 1 ]; then
  B=$repo
  nodecmd=(node)
else
  bundle=${WORLD_BUNDLE:-$repo/.bundle/world.tar.xz}
  [ -f "$bundle" ] || { echo "world.sh: no bundle at $bundle" >&2; exit 1; }
  unpack=$(mktemp -d /tmp/world.XXXXXX)
  trap 'rm -rf "$unpack"' EXIT
  tar -xJf "$bundle" -C "$unpack"
  B=$unpack/reactor
  cp "$repo/scripts/gpu/world.mjs" "$B/scripts/gpu/world.mjs"
  cp "$repo/scripts/gpu/world-pipeline.mjs" "$B/scripts/gpu/world-pipeline.mjs"
  # The tree's model package over the bundle's: a Python-only change needs no new bundle.
  cp -r "$repo/apps/world/python/." "$B/apps/world/python/"
  # ... and its weights (a bundle made with BUNDLE_SKIP=...,world-weights leaves them to the tree).
  mkdir -p "$B/apps/world/weights" && cp -r "$repo/apps/world/weights/." "$B/apps/world/weights/"
  nodecmd=("$B/run.sh" node)
fi
py=${REACTOR_PYTHON:-python3}
export REACTOR_PYTHON=$py PYTHONUNBUFFERED=1
cd "$B"
{
  date -u
  nvidia-smi 2>&1 | head -15 || echo "no nvidia-smi"
  echo "cores: $(nproc)"
  "$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())' 2>&1
} > "$out/world-env.txt"
: > "$out/world.jsonl"
: > "$out/world.err"
limit=${WORLD_TIMEOUT_S:-540}
deadline=$(($(date +%s) + limit))
left() { echo $((deadline - $(date +%s))); }
bench() { (cd apps/world/python && PYTHONPATH="$B/packages/distributed/python" timeout -k 5 "$(left)" "$py" -m reactor_world.bench "$@") >> "$out/world.jsonl" 2>> "$out/world.err"; }
# The KV-cache snapshot (issue 41): session_state() to host memory and back, its bytes, bit-exactness.
snapshot() {
  [ "$(left)" -gt 30 ] || { echo '{"bench":"error.world.timeout","label":"snapshot"}' >> "$out/world.jsonl"; return; }
  echo "[world] snapshot $* $(left) s left" >> "$out/world.err"
  (cd apps/world/python && PYTHONPATH="$B/packages/distributed/python" timeout -k 5 "$(left)" "$py" -m reactor_world.snapshot_bench "$@") >> "$out/world.jsonl" 2>> "$out/world.err" \
    || echo "{\"bench\":\"error.world.snapshot\",\"rc\":$?}" >> "$out/world.jsonl"
}
serve() {
  local label=$1 cfg=$2
  [ "$(left)" -gt 40 ] || { echo "{\"bench\":\"error.world.timeout\",\"label\":\"$label\"}" >> "$out/world.jsonl"; return; }
  echo "[world] serve $label (${cfg}) $(left) s left" >> "$out/world.err"
  WORLD_LABEL=$label WORLD_CONFIG=$cfg timeout -k 10 "$(left)" "${nodecmd[@]}" scripts/gpu/world.mjs >> "$out/world.jsonl" 2>> "$out/world.err" \
    || echo "{\"bench\":\"error.world.serve\",\"label\":\"$label\",\"rc\":$?}" >> "$out/world.jsonl"
}
pipe() {
  [ "$(left)" -gt 60 ] || { echo '{"bench":"error.world.timeout","label":"pipeline"}' >> "$out/world.jsonl"; return; }
  # The model package comes from this tree, the runner from the bundle: a runner without calls in
  # flight cannot run a pipeline (and would refuse the ranks' protocol).
  if ! grep -q maxInFlight "$B/packages/distributed/dist/runner/options.js" 2>/dev/null; then
    echo '{"bench":"error.world.pipeline","message":"the bundle predates issue 39 (its runner has no maxInFlight): rebuild it from this tree"}' >> "$out/world.jsonl"
    return
  fi
  echo "[world] pipeline $(left) s left" >> "$out/world.err"
  timeout -k 10 "$(left)" "${nodecmd[@]}" scripts/gpu/world-pipeline.mjs >> "$out/world.jsonl" 2>> "$out/world.err" \
    || echo "{\"bench\":\"error.world.pipeline\",\"rc\":$?}" >> "$out/world.jsonl"
}
if [ "$cpu" = 1 ]; then
  bench --models small --chunks 6
  snapshot --models small --chunks 6 --device cpu
  WORLD_SECONDS=3 WORLD_SWITCHES=4 serve cpu-small ''
  case ",${WORLD_PARTS:-}," in *,tiny,*) WORLD_APP=tiny WORLD_SECONDS=3 WORLD_SWITCHES=4 serve cpu-tiny '' ;; esac
  WORLD_PIPE_MODEL=small WORLD_PIPE_DEVICE=cpu WORLD_PIPE_CHUNKS=4 pipe
  WORLD_SECONDS=3 WORLD_SWITCHES=4 serve cpu-small-not-urgent 'urgent: false'
else
  # WORLD_PARTS picks parts (default: the first five): model, serve-eager, window21, 14b,
  # serve-compiled, graphs (eager / compiled / CUDA graphs), soak (WORLD_SOAK_S of chunks, memory sampled),
  # tiny (the trained tiny world served, issue 40), pipeline (the two pipeline shapes against the
  # plain model, issue 39), urgent (command-to-pixel with the prompt urgent and not, issue 39).
  # snapshot (the KV cache to host memory and back at 832x480: wan-1.3b with its 12- and 21-frame windows, then wan-14b).
  parts=",${WORLD_PARTS:-model,serve-eager,window21,14b,serve-compiled},"
  has() { [[ $parts == *",$1,"* ]]; }
  has model && bench --models wan-1.3b --chunks 8 --compile off,on
  has serve-eager && serve eager-1.3b ''
  has window21 && bench --models wan-1.3b --chunks 9 --window 21 --sink 0
  has 14b && bench --models wan-14b --chunks 5
  has serve-compiled && serve compiled-1.3b 'compile: on'
  has graphs && bench --models wan-1.3b --chunks 8 --compile off,on,graphs
  has soak && bench --models wan-1.3b --soak-seconds "${WORLD_SOAK_S:-180}"
  # tiny: the trained tiny world (issue 40) through the serving path, bf16 and fp32.
  has tiny && WORLD_APP=tiny serve tiny-bf16 ''
  has tiny && WORLD_APP=tiny WORLD_SECONDS=10 WORLD_SWITCHES=12 serve tiny-fp32 'dtype: fp32'
  has pipeline && pipe
  has urgent && serve urgent-1.3b 'urgent: true'
  has urgent && serve not-urgent-1.3b 'urgent: false'
  has snapshot && snapshot --models wan-1.3b --chunks 6
  has snapshot && snapshot --models wan-1.3b --chunks 9 --window 21
  has snapshot && snapshot --models wan-14b --chunks 5 --repeats 2
fi
echo "python ranks left: $(pgrep -fc 'reactor_worker._rank' || true)" >> "$out/world-env.txt"
cat "$out/world-env.txt" "$out/world.jsonl"
