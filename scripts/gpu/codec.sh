#!/usr/bin/env bash
# The video codec measurements (issue 14) on a GPU host's CPU cores (H200s have no video encoder
# block; encoding runs on CPU): unpack the codec bundle (BUNDLE_SKIP=enhance scripts/bundle/make.sh
# writes .bundle/reactor-linux-x64.tar.xz without the ESRGAN models, with @napi-rs/webcodecs),
# then bench/codec.bench.mjs (stream.bitrate, stream.encode). One JSON object per line in
# $OUT/codec.jsonl; progress in $OUT/codec.err.
#
#   bash scripts/gpu/codec.sh            from the repository root, on the GPU host
# Every CODEC_BENCH_* variable of bench/codec.bench.mjs passes through.
set -u
repo=$(pwd)
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
bundle=${CODEC_BUNDLE:-$repo/.bundle/reactor-linux-x64.tar.xz}
[ -f "$bundle" ] || { echo "codec.sh: no bundle at $bundle (BUNDLE_SKIP=enhance scripts/bundle/make.sh builds it)" >&2; exit 1; }
unpack=$(mktemp -d /tmp/codec-bundle.XXXXXX)
trap 'rm -rf "$unpack"' EXIT
tar -xJf "$bundle" -C "$unpack"
B=$unpack/reactor
mkdir -p "$B/bench"
cp "$repo/bench/codec.bench.mjs" "$B/bench/codec.bench.mjs"
cd "$B"
{
  date -u
  nvidia-smi -L 2>&1 || echo "no nvidia-smi"
  echo "cores: $(nproc)"
  lscpu | grep -E 'Model name|^CPU\(s\)' || true
} > "$out/codec-env.txt" 2>&1
timeout -k 10 "${CODEC_TIMEOUT_S:-420}" "$B/run.sh" node bench/codec.bench.mjs > "$out/codec.jsonl" 2> "$out/codec.err"
rc=$?
cat "$out/codec-env.txt" "$out/codec.jsonl"
exit $rc
