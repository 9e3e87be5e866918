#!/usr/bin/env bash
# Runs the collectives bench (bench/collectives.bench.mjs, issue 12) from the offline GPU bundle,
# which leaves bench/ and tests out: unpacks the bundle (carried as
# .bundle/reactor-linux-x64.tar.xz, built by scripts/bundle/make.sh), adds the bench and its
# worker, runs it with the bundled node and writes one JSON object per line to
# $OUT/collectives.jsonl (machine facts in $OUT/collectives-env.txt).
# Run from the repository root:  bash scripts/gpu/collectives.sh
# Passes COLL_BENCH_WORLD_SIZES / COLL_BENCH_BYTES / COLL_BENCH_QUICK through (default here:
# world sizes 2,4,8 and parts of 64 KiB, 1 MiB and 11 MB).
set -euo pipefail
out=${OUT:-/tmp/gpu-out}
bundle=${BUNDLE:-.bundle/reactor-linux-x64.tar.xz}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
[ -f "$bundle" ] || { echo "no bundle at $bundle: build it with scripts/bundle/make.sh (or set BUNDLE)" >&2; exit 1; }
tar -xJf "$bundle" -C "$work"
B=$work/reactor
mkdir -p "$B/bench" "$B/packages/distributed/test/fixtures"
cp bench/collectives.bench.mjs "$B/bench/"
cp packages/distributed/test/fixtures/coll-bench.mjs "$B/packages/distributed/test/fixtures/"
{ date -u; echo "cores: $(nproc)"; nvidia-smi -L 2>/dev/null || echo 'no nvidia-smi'; df -h /dev/shm | tail -1; } > "$out/collectives-env.txt" 2>&1
cd "$B"
COLL_BENCH_WORLD_SIZES=${COLL_BENCH_WORLD_SIZES:-2,4,8} ./run.sh node --expose-gc bench/collectives.bench.mjs | tee "$out/collectives.jsonl"
