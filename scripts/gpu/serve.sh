#!/usr/bin/env bash
# Serving at the GPU's speed (issue 42) on one GPU host, in one run of about 8 minutes:
#   1. the model alone (python3 -m reactor_enhance.bench), thick (8 frames a call) and medium (4),
#      eager and compiled (SERVE_BENCH_COMPILE, default off,both: torch.compile + CUDA graphs),
#      with `nvidia-smi dmon` beside it (GPU busy);
#   2. bench/jpeg.bench.mjs: JPEG encodes a second at 1280x720, one at a time against the pool;
#   3. scripts/gpu/serve.mjs: delivered JPEG, H.264 and raw RGB through `reactor run` (compile:
#      auto), side by side, GPU busy %; then sessions per GPU: N instances of 720p30 sessions on
#      the one GPU until one misses >= 29 fps or frame-interval p99 <= 50 ms.
# One JSON object per line in $OUT/serve.jsonl; progress in $OUT/serve.err; the machine in
# $OUT/serve-env.txt; nvidia-smi dmon in $OUT/serve-dmon.txt.
#
# The bundle with the H.264 encoder and the checkout do not fit one command's 64 MiB, so it comes
# in two parts (scripts/gpu/serve-pack.sh), unpacked by two calls on the same warm machine:
#   bash scripts/gpu/serve.sh unpack .bundle/serve-a.tar.xz      call 1 (carry .bundle/serve-a.tar.xz)
#   bash scripts/gpu/serve.sh unpack .bundle/serve-b.tar.xz && bash scripts/gpu/serve.sh
#                                                                call 2, within 30 s (carry .bundle/serve-b.tar.xz)
# Both unpack into .bundle/serve (ignored: kept between calls while the machine stays warm).
# Rehearsal without a GPU, from the built checkout:
#   SERVE_CPU=1 SERVE_FROM_TREE=1 REACTOR_PYTHON=/usr/bin/python3 bash scripts/gpu/serve.sh
# SERVE_TIMEOUT_S (480) bounds the whole run; every SERVE_* variable of serve.mjs passes through.
set -u
repo=$(pwd)
dir=${SERVE_DIR:-$repo/.bundle/serve}
if [ "${1:-}" = unpack ]; then
  [ -f "${2:-}" ] || { echo "serve.sh unpack: no file ${2:-}" >&2; exit 1; }
  mkdir -p "$dir" && tar -xJf "$2" -C "$dir" && echo "unpacked $2 into $dir ($(du -sh "$dir" | cut -f1))"
  exit $?
fi
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
: > "$out/serve.jsonl"
: > "$out/serve.err"
cpu=${SERVE_CPU:-0}
start=$(date +%s)
limit=${SERVE_TIMEOUT_S:-480}
deadline=$((start + limit))
left() { echo $((deadline - $(date +%s))); }
fail() { echo "{\"bench\":\"error.serve\",\"why\":\"$1\"}" | tee -a "$out/serve.jsonl"; exit 1; }
if [ "${SERVE_FROM_TREE:-0}" = 1 ]; then
  B=$repo
  nodecmd=(node)
  reactorcmd=(node packages/cli/dist/main.js)
  pkgs=$B/apps/enhance/node_modules
else
  B=$dir/reactor
  [ -x "$B/.runtime/node" ] || fail "no part a in $dir (call 1: bash scripts/gpu/serve.sh unpack .bundle/serve-a.tar.xz; the machine may have been given back between the calls)"
  [ -d "$B/node_modules/@upscalerjs/esrgan-thick" ] || fail "no part b in $dir (bash scripts/gpu/serve.sh unpack .bundle/serve-b.tar.xz)"
  cp "$repo/scripts/gpu/serve.mjs" "$B/scripts/gpu/serve.mjs"
  nodecmd=("$B/run.sh" node)
  reactorcmd=("$B/run.sh" reactor)
  pkgs=$B/node_modules
fi
py=${REACTOR_PYTHON:-python3}
export REACTOR_PYTHON=$py
# One cache of compiled kernels for the bench and the servers: a server compiles what the bench did from it.
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/serve-inductor}
export UV_THREADPOOL_SIZE=${UV_THREADPOOL_SIZE:-$(nproc)}
cd "$B"
cfg=$(mktemp -d /tmp/serve-cfg.XXXXXX)
printf 'backend: torch\n' > "$cfg/config.yaml"
printf 'model: { name: enhance-serve, version: 0.0.1, resources: { gpu: { count: 1 } } }\nruntime:\n  import: %s:EnhanceApp\n  config: config.yaml\n' "$B/apps/enhance/dist/index.js" > "$cfg/reactor.yaml"
{
  date -u
  nvidia-smi 2>&1 || echo "no nvidia-smi"
  echo "cores: $(nproc)"
  free -g 2>/dev/null | head -2
  "$py" -c 'import sys, numpy, torch; print("python", sys.version.split()[0], sys.executable, "numpy", numpy.__version__, "torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count(), "cudnn", torch.backends.cudnn.version() if torch.cuda.is_available() else None, "triton", __import__("importlib.util").util.find_spec("triton") is not None)' 2>&1
  timeout 60 "${reactorcmd[@]}" doctor --manifest "$cfg/reactor.yaml" 2>&1
} > "$out/serve-env.txt"
rm -rf "$cfg"
shm_before=$(ls /dev/shm 2>/dev/null | grep '^reactor-' | sort)
dmon=
if command -v nvidia-smi >/dev/null; then
  nvidia-smi dmon -s u -o T > "$out/serve-dmon.txt" 2>&1 &
  dmon=$!
fi
trap '[ -n "$dmon" ] && kill $dmon 2>/dev/null' EXIT

if [ "$cpu" = 1 ]; then
  bench=(--models slim --frames 2 --width 32 --height 20 --seconds 1)
else
  bench=(--models thick,medium --frames 8,4 --width 320 --height 180 --seconds 3)
fi
# Eager first (a few seconds a model), then compiled beside eager again (its bytes compared): a
# compile that takes too long still leaves the eager figures.
pybench() {
  (cd apps/enhance/python && PYTHONPATH="$B/packages/distributed/python" timeout -k 5 "$1" "$py" -m reactor_enhance.bench \
    --package-root "$pkgs" --compile "$2" "${bench[@]}") >> "$out/serve.jsonl" 2>> "$out/serve.err" \
    || echo "{\"bench\":\"error.serve.model\",\"compile\":\"$2\",\"rc\":$?}" >> "$out/serve.jsonl"
}
echo "[serve] model alone, eager ($(left) s left)" >> "$out/serve.err"
pybench 60 off
echo "[serve] model alone, ${SERVE_BENCH_COMPILE:-off,both} ($(left) s left)" >> "$out/serve.err"
pybench "${SERVE_BENCH_TIMEOUT_S:-150}" "${SERVE_BENCH_COMPILE:-off,both}"

# JPEG at 1280x720 on this host's cores: one at a time against the pool (bench/jpeg.bench.mjs, from the checkout).
echo "[serve] jpeg.encode ($(left) s left)" >> "$out/serve.err"
mkdir -p "$B/bench" && cp "$repo/bench/jpeg.bench.mjs" "$B/bench/jpeg.bench.mjs" 2>/dev/null
JPEG_BENCH_SECONDS=${JPEG_BENCH_SECONDS:-2} timeout -k 5 60 "${nodecmd[@]}" bench/jpeg.bench.mjs >> "$out/serve.jsonl" 2>> "$out/serve.err" \
  || echo '{"bench":"error.serve.jpeg"}' >> "$out/serve.jsonl"

echo "[serve] serving ($(left) s left)" >> "$out/serve.err"
rc=0
t=$(left)
if [ "$t" -gt 30 ]; then
  SERVE_DEADLINE=$((deadline - 10)) timeout -k 10 "$t" "${nodecmd[@]}" scripts/gpu/serve.mjs >> "$out/serve.jsonl" 2>> "$out/serve.err"
  rc=$?
  [ $rc -ne 0 ] && echo "{\"bench\":\"error.serve.run\",\"rc\":$rc}" >> "$out/serve.jsonl"
else
  echo '{"bench":"error.serve.timeout","before":"serving"}' >> "$out/serve.jsonl"
  rc=124
fi
sleep 2
{
  echo "took: $(($(date +%s) - start)) s"
  echo "python ranks left: $(pgrep -fc 'reactor_worker._rank' || true)"
  echo "new reactor- segments left in /dev/shm: $(comm -13 <(echo "$shm_before") <(ls /dev/shm 2>/dev/null | grep '^reactor-' | sort) | tr '\n' ' ')"
} >> "$out/serve-env.txt"
cat "$out/serve-env.txt" "$out/serve.jsonl"
exit $rc
