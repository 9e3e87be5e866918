#!/usr/bin/env bash
# Second GPU session: (1) which GPU Mesa 22.3's and 25.0's device-select layers pick for a
# DRI_PRIME tag; (2) where the 512x512 serve path's time goes (JPEG vs raw, libvips threads,
# frames per chunk). Needs .bundle/reactor-linux-x64.tar.xz and .gl2/ (layer25, probe.mjs).
set -u
out=${OUT:-/tmp/gpu-out}; mkdir -p "$out" /tmp/g
tar -xJf .bundle/reactor-linux-x64.tar.xz -C /tmp/g
B=/tmp/g/reactor
cp scripts/gpu/measure.mjs "$B/scripts/gpu/measure.mjs"
G=$PWD/.gl2
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
L=$B/.runtime/gpu
{
for layer in "$L/layer" "$G/layer25"; do
  for tag in pci-0000_00_06_0 pci-0000_00_07_0; do
    echo "== $(basename $layer) $tag"
    env VK_LAYER_PATH=$layer VK_INSTANCE_LAYERS=VK_LAYER_MESA_device_select LD_LIBRARY_PATH=$L/lib:${LD_LIBRARY_PATH:-} \
      DRI_PRIME=$tag MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE=1 MESA_VK_DEVICE_SELECT_DEBUG=1 DRI_PRIME_DEBUG=1 \
      $B/.runtime/node $G/probe.mjs $tag 4 2>&1 | grep -v submits &
    sleep 3; nvidia-smi --query-gpu=index,pci.bus_id,memory.used --format=csv,noheader; wait
  done
done
} > "$out/select.txt" 2>&1
cd "$B"
for v in "jpeg 4 -" "rgb 4 -" "jpeg 4 1" "jpeg 8 -"; do
  set -- $v
  if [ "$3" = "-" ]; then unset VIPS_CONCURRENCY; else export VIPS_CONCURRENCY=$3; fi
  MEASURE_SECONDS=12 MEASURE_ENCODING=$1 MEASURE_FRAMES=$2 timeout 60 ./run.sh node scripts/gpu/measure.mjs serve >> "$out/serve.jsonl" 2>> "$out/serve.err"
done
unset VIPS_CONCURRENCY
cat "$out/select.txt" "$out/serve.jsonl"
