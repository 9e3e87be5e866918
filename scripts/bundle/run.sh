#!/usr/bin/env bash
# Runs a command from an unpacked Reactor bundle on a machine without node or network.
#   ./run.sh reactor run [--port 8080] ...     serve the app named by reactor.yaml
#   ./run.sh node <script> [args]               run any script with the bundled node
# Sets up the bundled Vulkan loader, the glvnd libraries the NVIDIA driver needs, and Mesa's
# device-select layer (which @reactor/distributed uses to give each rank its own GPU).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
gpu=$here/.runtime/gpu
export LD_LIBRARY_PATH="$gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export REACTOR_VK_LAYER_PATH="$gpu/layer"
if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ]; then
  for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
    [ -f "$icd" ] && { export VK_DRIVER_FILES=$icd; break; }
  done
fi
# JPEG encodes run on libuv's threadpool, sized when node starts (packages/server/src/video/frame-encoder.ts): one a core.
export UV_THREADPOOL_SIZE=${UV_THREADPOOL_SIZE:-$(nproc)}
node=$here/.runtime/node
cd "$here"
case "${1:-}" in
  reactor) shift; exec "$node" packages/cli/dist/main.js "$@" ;;
  node) shift; exec "$node" "$@" ;;
  *) echo "usage: run.sh reactor <command> [options] | run.sh node <script> [args]" >&2; exit 2 ;;
esac
