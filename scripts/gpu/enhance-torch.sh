#!/usr/bin/env bash
# The enhance app's PyTorch backend on a GPU host (issue 23), in one command of about 5 minutes:
# unpack the offline bundle (.bundle/reactor-linux-x64.tar.xz, scripts/bundle/make.sh), print the
# machine, python3/torch/CUDA and `reactor doctor`, then
#   1. the model alone (python3 -m reactor_enhance.bench): ms a frame on the GPU, float16 vs
#      float32 agreement, the copy back;
#   2. enhance.fps through the whole serving path (`reactor run` in a child process, a client in
#      another process, 1280x720 output, backend: torch, 1 rank): medium (4 frames a step) and
#      thick (8 frames a step), JPEG (what a browser gets) and raw RGB (the same path without
#      the encode), nvidia-smi utilisation sampled through each window;
#      and after each fps window command-to-pixel (issue 26, ENHANCE_LATENCY=0 leaves it out): 40
#      set_side_by_side toggles, send -> delivery of the frame the `applied` message names, and
#      of the first frame that shows the change (enhance.c2p);
#   3. a Python rank SIGKILLed mid-step (thick): time until the client is told, processes and
#      /dev/shm segments left, frames again from the rebuilt runner.
# One JSON object per line in $OUT/enhance-torch.jsonl (and on stdout at the end); progress in
# $OUT/enhance-torch.err; the machine in $OUT/enhance-torch-env.txt.
#
#   bash scripts/gpu/enhance-torch.sh                       from the repository root, on the GPU host
#   ENHANCE_CPU=1 REACTOR_PYTHON=/usr/bin/python3 bash scripts/gpu/enhance-torch.sh
#                                                           rehearsal without a GPU (CPU ranks, tiny sizes)
#   ENHANCE_FROM_TREE=1 ...                                 the built checkout instead of the bundle
# TORCH_MODELS (medium,thick), TORCH_ENCODINGS (jpeg,rgb), ENHANCE_SECONDS etc. pass through.
set -u
repo=$(pwd)
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
cpu=${ENHANCE_CPU:-0}
if [ "${ENHANCE_FROM_TREE:-0}" = 1 ]; then
  B=$repo
  nodecmd=(node)
  reactorcmd=(node packages/cli/dist/main.js)
else
  bundle=${ENHANCE_BUNDLE:-$repo/.bundle/reactor-linux-x64.tar.xz}
  [ -f "$bundle" ] || { echo "enhance-torch.sh: no bundle at $bundle (scripts/bundle/make.sh builds it)" >&2; exit 1; }
  unpack=$(mktemp -d /tmp/enhance-torch.XXXXXX)
  trap 'rm -rf "$unpack"' EXIT
  tar -xJf "$bundle" -C "$unpack"
  B=$unpack/reactor
  cp "$repo/scripts/gpu/enhance.mjs" "$B/scripts/gpu/enhance.mjs"
  nodecmd=("$B/run.sh" node)
  reactorcmd=("$B/run.sh" reactor)
fi
py=${REACTOR_PYTHON:-python3}
export REACTOR_PYTHON=$py
cd "$B"
cfg=$(mktemp -d /tmp/enhance-torch-cfg.XXXXXX)
printf 'backend: torch\n' > "$cfg/config.yaml"
printf 'model: { name: enhance-torch, version: 0.0.1, resources: { gpu: { count: 1 } } }\nruntime:\n  import: %s:EnhanceApp\n  config: config.yaml\n' "$B/apps/enhance/dist/index.js" > "$cfg/reactor.yaml"
{
  date -u
  nvidia-smi 2>&1 || echo "no nvidia-smi"
  echo "cores: $(nproc)"
  "$py" -c 'import sys, numpy, torch; print("python", sys.version.split()[0], sys.executable, "numpy", numpy.__version__, "torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count(), "cudnn", torch.backends.cudnn.version() if torch.cuda.is_available() else None)' 2>&1
  "${reactorcmd[@]}" doctor --manifest "$cfg/reactor.yaml" 2>&1
} > "$out/enhance-torch-env.txt"
rm -rf "$cfg"
: > "$out/enhance-torch.jsonl"
shm_before=$(ls /dev/shm 2>/dev/null | grep '^reactor-' | sort)
: > "$out/enhance-torch.err"
limit=${ENHANCE_TIMEOUT_S:-500}
deadline=$(($(date +%s) + limit))
left() { echo $((deadline - $(date +%s))); }

if [ "$cpu" = 1 ]; then sizes=(--width 32 --height 20 --seconds 1 --frames 1,1); else sizes=(--width 320 --height 180 --seconds 3 --frames 4,8); fi
# The model packages: hoisted in the bundle, under the app in a checkout.
pkgs=$B/node_modules
[ -d "$B/apps/enhance/node_modules/@upscalerjs" ] && pkgs=$B/apps/enhance/node_modules
(cd apps/enhance/python && timeout -k 5 "$(left)" "$py" -m reactor_enhance.bench --package-root "$pkgs" --models medium,thick "${sizes[@]}") \
  >> "$out/enhance-torch.jsonl" 2>> "$out/enhance-torch.err" || echo '{"bench":"error.enhance.torch.model"}' >> "$out/enhance-torch.jsonl"

IFS=, read -r -a models <<< "${TORCH_MODELS:-medium,thick}"
IFS=, read -r -a encodings <<< "${TORCH_ENCODINGS:-jpeg,rgb}"
rc=0
for enc in "${encodings[@]}"; do
  for m in "${models[@]}"; do
    frames=4
    [ "$m" = thick ] && frames=8
    [ "$cpu" = 1 ] && frames=2
    crash=0
    # The crash test once, on the first encoding's thick server (its steps are the longest).
    [ "$m" = "${models[${#models[@]}-1]}" ] && [ "$enc" = "${encodings[0]}" ] && crash=1
    t=$(left)
    [ "$t" -gt 20 ] || { echo "{\"bench\":\"error.enhance.timeout\",\"model\":\"$m\",\"encoding\":\"$enc\"}" >> "$out/enhance-torch.jsonl"; rc=124; break 2; }
    echo "[enhance-torch] $m, $frames frames a step, $enc (${t} s left)" >> "$out/enhance-torch.err"
    ENHANCE_LATENCY=${ENHANCE_LATENCY:-1} ENHANCE_FIRST_FRAME_S=${ENHANCE_FIRST_FRAME_S:-90} ENHANCE_BACKEND=torch ENHANCE_MODELS=$m ENHANCE_WORLD_SIZES=1 ENHANCE_FRAMES=$frames ENHANCE_ENCODING=$enc ENHANCE_CRASH=$crash \
      timeout -k 10 "$t" "${nodecmd[@]}" scripts/gpu/enhance.mjs >> "$out/enhance-torch.jsonl" 2>> "$out/enhance-torch.err"
    r=$?
    [ $r -ne 0 ] && { echo "{\"bench\":\"error.enhance.run\",\"model\":\"$m\",\"encoding\":\"$enc\",\"rc\":$r}" >> "$out/enhance-torch.jsonl"; rc=$r; }
  done
done
# What the runs left behind: Python ranks and shared-memory segments (none expected).
sleep 2
{
  echo "python ranks left: $(pgrep -fc 'reactor_worker._rank' || true)"
  echo "new reactor- segments left in /dev/shm: $(comm -13 <(echo "$shm_before") <(ls /dev/shm 2>/dev/null | grep '^reactor-' | sort) | tr '\n' ' ')"
} >> "$out/enhance-torch-env.txt"
cat "$out/enhance-torch-env.txt" "$out/enhance-torch.jsonl"
exit $rc
