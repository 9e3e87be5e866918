#!/usr/bin/env bash
# The enhance app's GPU measurement (issue 12) in one command of at most ~8 minutes: unpack the
# offline bundle (.bundle/reactor-linux-x64.tar.xz, built by scripts/bundle/make.sh), print the
# machine and `reactor doctor` for the enhance manifest, then enhance.fps per model (slim,
# medium, thick) at 1280x720 output on 1 and 2 GPUs, tiles vs frames, delivered to a client in
# another process, with nvidia-smi utilisation per GPU. One JSON object per line in
# $OUT/enhance.jsonl (and on stdout at the end); progress in $OUT/enhance.err.
#
#   bash scripts/gpu/enhance.sh                 from the repository root, on the GPU host
#   ENHANCE_CPU=1 bash scripts/gpu/enhance.sh   rehearsal without a GPU (CPU ranks, wasm, tiny sizes)
#   ENHANCE_FROM_TREE=1 ...                     run the built checkout instead of the bundle
# Every ENHANCE_* variable of scripts/gpu/enhance.mjs passes through.
set -u
repo=$(pwd)
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
if [ "${ENHANCE_FROM_TREE:-0}" = 1 ]; then
  B=$repo
  nodecmd=(node)
  reactorcmd=(node packages/cli/dist/main.js)
else
  bundle=${ENHANCE_BUNDLE:-$repo/.bundle/reactor-linux-x64.tar.xz}
  [ -f "$bundle" ] || { echo "enhance.sh: no bundle at $bundle (scripts/bundle/make.sh builds it)" >&2; exit 1; }
  unpack=$(mktemp -d /tmp/enhance-bundle.XXXXXX)
  trap 'rm -rf "$unpack"' EXIT
  tar -xJf "$bundle" -C "$unpack"
  B=$unpack/reactor
  cp "$repo/scripts/gpu/enhance.mjs" "$B/scripts/gpu/enhance.mjs"
  nodecmd=("$B/run.sh" node)
  reactorcmd=("$B/run.sh" reactor)
fi
cd "$B"
{
  date -u
  nvidia-smi -L 2>&1 || echo "no nvidia-smi"
  echo "cores: $(nproc)"
  du -sh "$B/node_modules/@upscalerjs" 2>/dev/null
  "${reactorcmd[@]}" doctor --manifest apps/enhance/reactor.yaml
} > "$out/enhance-env.txt" 2>&1
limit=${ENHANCE_TIMEOUT_S:-450}
timeout -k 10 "$limit" "${nodecmd[@]}" scripts/gpu/enhance.mjs > "$out/enhance.jsonl" 2> "$out/enhance.err"
rc=$?
[ $rc -eq 124 ] && echo "{\"bench\":\"error.enhance.timeout\",\"limitSeconds\":$limit}" >> "$out/enhance.jsonl"
cat "$out/enhance-env.txt" "$out/enhance.jsonl"
exit $rc
