#!/usr/bin/env bash
# One GPU-machine session for issues 6 and 7: unpack the bundle (carried as
# .bundle/reactor-linux-x64.tar.xz), run every measurement, write the results under $OUT.
# Run from the repository root:  bash scripts/gpu/session.sh
set -u
repo=$(pwd)
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out" /tmp/g
tar -xJf .bundle/reactor-linux-x64.tar.xz -C /tmp/g
B=/tmp/g/reactor
# The runner bench and its worker fixture are not part of the bundle.
cp -r bench "$B/"
mkdir -p "$B/packages/distributed/test/fixtures"
cp packages/distributed/test/fixtures/bench.mjs "$B/packages/distributed/test/fixtures/"
cp scripts/gpu/measure.mjs "$B/scripts/gpu/measure.mjs"
cd "$B"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=index,pci.bus_id,driver_version --format=csv; echo "cores: $(nproc)"; ./run.sh reactor doctor; } > "$out/env.txt" 2>&1
for part in model serve scale crash; do
  echo "== $part $(date -u +%T)" >> "$out/measure.err"
  timeout 200 ./run.sh node scripts/gpu/measure.mjs $part >> "$out/measure.jsonl" 2>> "$out/measure.err"
done
echo "== runner bench $(date -u +%T)" >> "$out/measure.err"
RUNNER_BENCH_WORLD_SIZES=1,2,4,8 RUNNER_BENCH_BASELINE=1 timeout 200 ./run.sh node --expose-gc bench/runner.bench.mjs > "$out/runner.jsonl" 2>> "$out/measure.err"
echo "== done $(date -u +%T)" >> "$out/measure.err"
cat "$out/measure.jsonl" "$out/runner.jsonl"
