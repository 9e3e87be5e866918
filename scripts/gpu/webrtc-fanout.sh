#!/usr/bin/env bash
# The WebRTC fan-out benchmark (issue 24) on a GPU host's CPU cores (no node there): unpack the
# codec bundle (BUNDLE_SKIP=enhance scripts/bundle/make.sh writes .bundle/reactor-linux-x64.tar.xz
# with @napi-rs/webcodecs and werift), then bench/webrtc-fanout.bench.mjs (its viewers run in a
# child process, bench/webrtc-viewers.mjs). One JSON object per line in $OUT/fanout.jsonl.
#
#   bash scripts/gpu/webrtc-fanout.sh        from the repository root, on the GPU host
# Every FANOUT_* variable of bench/webrtc-fanout.bench.mjs passes through.
set -u
repo=$(pwd)
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
bundle=${FANOUT_BUNDLE:-$repo/.bundle/reactor-linux-x64.tar.xz}
[ -f "$bundle" ] || { echo "webrtc-fanout.sh: no bundle at $bundle (BUNDLE_SKIP=enhance scripts/bundle/make.sh builds it)" >&2; exit 1; }
unpack=$(mktemp -d /tmp/fanout-bundle.XXXXXX)
trap 'rm -rf "$unpack"' EXIT
tar -xJf "$bundle" -C "$unpack"
B=$unpack/reactor
mkdir -p "$B/bench"
cp "$repo/bench/webrtc-fanout.bench.mjs" "$repo/bench/webrtc-viewers.mjs" "$B/bench/"
cd "$B"
{
  date -u
  echo "cores: $(nproc)"
  lscpu | grep -E 'Model name|^CPU\(s\)' || true
} > "$out/fanout-env.txt" 2>&1
timeout -k 10 "${FANOUT_TIMEOUT_S:-300}" "$B/run.sh" node bench/webrtc-fanout.bench.mjs > "$out/fanout.jsonl" 2> "$out/fanout.err"
rc=$?
cat "$out/fanout-env.txt" "$out/fanout.jsonl"
tail -5 "$out/fanout.err"
exit $rc
