#!/usr/bin/env bash
# Splits an offline bundle into the two parts scripts/gpu/serve.sh carries (issue 42): a command
# on the GPU machine carries at most 64 MiB, the checkout included (19.4 MB on 2026-12-02, 12.5 MB
# of it the tiny world's weights), and the bundle with the H.264 encoder is about 69 MB on its own.
#
#   BUNDLE_SKIP=world scripts/bundle/make.sh       the bundle with the codec (.bundle/reactor-linux-x64.tar.xz)
#   bash scripts/gpu/serve-pack.sh [BUNDLE]        -> .bundle/serve-a.tar.xz, .bundle/serve-b.tar.xz
#
# Left out of both (what `reactor run` with backend: torch never loads): typescript, the router's
# Kubernetes client, the webgpu addon and tfjs's webgpu backend, the Vulkan libraries
# (.runtime/gpu), apps/world; node's symbols are stripped.
#   part a: everything else but the two below (node, sharp, the JS packages, medium and slim)
#   part b: @napi-rs/webcodecs (the H.264 encoder) and ESRGAN thick's weights
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=${1:-$root/.bundle/reactor-linux-x64.tar.xz}
[ -f "$bundle" ] || { echo "serve-pack.sh: no bundle at $bundle (BUNDLE_SKIP=world scripts/bundle/make.sh)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xJf "$bundle" -C "$work"
r=$work/reactor
[ -d "$r/node_modules/@napi-rs/webcodecs" ] || { echo "serve-pack.sh: the bundle has no @napi-rs/webcodecs (build it with BUNDLE_SKIP=world, not codec)" >&2; exit 1; }
[ -d "$r/node_modules/@upscalerjs/esrgan-thick" ] || { echo "serve-pack.sh: the bundle has no ESRGAN thick (not BUNDLE_SKIP=enhance)" >&2; exit 1; }
rm -rf "$r"/node_modules/typescript "$r"/node_modules/@kubernetes "$r"/node_modules/webgpu "$r"/node_modules/@tensorflow/tfjs-backend-webgpu "$r"/.runtime/gpu "$r"/apps/world
strip "$r/.runtime/node" 2>/dev/null || true
b=(node_modules/@napi-rs node_modules/@upscalerjs/esrgan-thick)
mkdir -p "$root/.bundle"
(cd "$work" && tar -cf - "${b[@]/#/reactor/}" | xz -T0 -6 > "$root/.bundle/serve-b.tar.xz")
(cd "$work" && tar -cf - "${b[@]/#/--exclude=reactor/}" reactor | xz -T0 -6 > "$root/.bundle/serve-a.tar.xz")
ls -l "$root/.bundle/serve-a.tar.xz" "$root/.bundle/serve-b.tar.xz" >&2
