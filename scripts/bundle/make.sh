#!/usr/bin/env bash
# Builds one self-contained archive of the project for a linux-x64 GPU machine with no network
# and no node: the built packages, production node_modules (linux-x64 only), a node binary, the
# Vulkan loader + glvnd libraries the NVIDIA ICD needs, and Mesa's device-select layer (one GPU
# per rank). See docs/deploy.md.
#
#   scripts/bundle/make.sh [OUT]      (default: .bundle/reactor-linux-x64.tar.xz)
#
# Everything is about 73 MB compressed, past the 64 MiB a GPU-machine command may carry, so
# BUNDLE_SKIP (comma-separated) leaves parts out:
#   codec     @napi-rs/webcodecs (15 MB compressed): h264/vp8 streaming then fails with a clear
#             error and the server streams JPEG; what the enhance measurements carry
#   enhance   apps/enhance with its ESRGAN models and tfjs wasm/webgpu binaries' extra weight:
#             what the codec measurements carry (apps/video stays)
#   world     apps/world (the world model's Python package; a few hundred KB)
#   webgpu    the webgpu addon and the Vulkan libraries (tfjs on WebGPU; ~8 MB compressed): what
#             a PyTorch-only run (the world app) carries
#   world-weights  apps/world/weights (the tiny world's 12.5 MB): scripts/gpu/world.sh copies the
#             carried tree's instead
# Default: BUNDLE_SKIP=codec (the enhance/GPU bundle, as before the codec).
set -euo pipefail
skip=",${BUNDLE_SKIP-codec},"
has_skip() { [[ $skip == *",$1,"* ]]; }
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/.bundle/reactor-linux-x64.tar.xz}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage=$work/reactor
mkdir -p "$stage" "$(dirname "$out")"
log() { printf '[bundle] %s\n' "$*" >&2; }

[ "$(uname -m)" = x86_64 ] || { echo "make.sh must run on x86-64 (it builds native addons for linux-x64)" >&2; exit 1; }

log "building the workspace"
(cd "$root" && pnpm -s build)

log "copying sources, manifests and build output"
(cd "$root" && { git ls-files -co --exclude-standard -- . ':!:test/**' ':!:**/test/**' ':!:docs/**' ':!:bench/**'; \
  find packages apps -path '*/node_modules' -prune -o -path '*/dist/*' -type f -print; } | sort -u | tar -cf - -T -) | tar -xf - -C "$stage"

log "installing production dependencies (offline, from the local store)"
filters=(--filter '@reactor/app-video...' --filter '@reactor/cli...' --filter reactor-workspace)
has_skip enhance || filters+=(--filter '@reactor/app-enhance...')
has_skip world || filters+=(--filter '@reactor/app-world...')
(cd "$stage" && CI=true pnpm install --prod --frozen-lockfile --offline --config.node-linker=hoisted "${filters[@]}" >/dev/null)

log "trimming what a linux-x64 node never loads"
nm=$stage/node_modules
rm -rf "$nm"/webgpu/dist/{win32-x64,win32-arm64,darwin-universal,linux-arm64} "$nm"/webgpu/build
find "$nm" -name '*.map' -delete
find "$nm" \( -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' -o -name '*.md' -o -name '*.tsbuildinfo' \) -delete
for p in tfjs-core tfjs-layers tfjs-backend-cpu tfjs-backend-wasm tfjs-backend-webgpu; do
  d=$nm/@tensorflow/$p/dist
  [ -d "$d" ] || continue
  # Node loads the package's "main" CommonJS bundle (dist/*.node.js or dist/tf-*.node.js)
  # and, for wasm, the .wasm binaries; the browser/ESM builds are dead weight here.
  find "$d" -mindepth 1 -maxdepth 1 \( -name '*.min.js' -o -name '*.es2017.js' -o -name '*.fesm.js' -o -name 'miniprogram' \) -exec rm -rf {} +
done
rm -rf "$nm"/shm-typed-array/build/Release/obj.target "$nm"/shm-typed-array/src 2>/dev/null || true

if has_skip codec; then
  log "leaving out @napi-rs/webcodecs (BUNDLE_SKIP=codec): the server streams JPEG only"
  rm -rf "$nm"/@napi-rs/webcodecs "$nm"/@napi-rs/webcodecs-*
fi
if has_skip webgpu; then
  log "leaving out the webgpu addon (BUNDLE_SKIP=webgpu): tfjs runs on its CPU/wasm backends only"
  rm -rf "$nm"/webgpu
fi
if has_skip world-weights; then
  log "leaving out apps/world/weights (BUNDLE_SKIP=world-weights): the carried tree brings them"
  rm -rf "$stage/apps/world/weights"
fi
if has_skip enhance; then
  log "leaving out apps/enhance and its models (BUNDLE_SKIP=enhance)"
  rm -rf "$stage/apps/enhance" "$nm"/@upscalerjs
fi

# The enhance app's ESRGAN packages: only their x4 models (what the GPU measurement and the
# app's default use; other scales fail to load with a message naming the missing file), no
# browser bundles or sample pictures; thick's 28 MB of float32 weights become a 14 MB float16
# copy (apps/enhance/test/quantize.test.ts: output within one level of float32's).
for m in slim medium thick; do
  has_skip enhance && break
  d=$nm/@upscalerjs/esrgan-$m
  [ -d "$d" ] || { echo "make.sh: $d is missing (pnpm install)" >&2; exit 1; }
  rm -rf "$d"/dist "$d"/assets "$d"/models/x2 "$d"/models/x3 "$d"/models/x8
done
if ! has_skip enhance; then
  thick=$nm/@upscalerjs/esrgan-thick/models/x4
  mv "$thick" "$work/thick-x4-f32"
  node "$root/apps/enhance/scripts/quantize-weights.mjs" "$work/thick-x4-f32" "$thick"
  rm -rf "$work/thick-x4-f32"
fi

log "adding node $(node --version)"
mkdir -p "$stage/.runtime"
cp "$(command -v node)" "$stage/.runtime/node"

log "adding the Vulkan loader, glvnd and Mesa's device-select layer (Debian amd64 packages)"
debs=$root/.bundle/debs
if [ ! -f "$debs/.complete" ]; then
  # bookworm for the loader and libraries; bookworm-backports for Mesa 25's device-select layer:
  # Mesa 22.3's layer (bookworm) picks the wrong GPU for a DRI_PRIME=pci-... tag (measured, see
  # docs/gpu-selection.md).
  rm -rf "$debs"; mkdir -p "$debs" "$work/apt/lists/partial" "$work/apt/etc"
  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' > "$work/apt/etc/debian.sources"
  o="-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=$work/apt/lists -oDir::Etc::SourceList=/dev/null -oDir::Etc::SourceParts=$work/apt/etc -oDebug::NoLocking=1"
  apt-get $o update -qq
  (cd "$debs" && apt-get $o download libvulkan1 libglvnd0 libgl1 libglx0 libegl1 libopengl0 libgles2 mesa-vulkan-drivers/bookworm-backports \
     libxcb-dri3-0 libwayland-client0 libdrm2 libxcb1 libffi8 libxau6 libxdmcp6 libbsd0 libmd0 2>&1 | grep -v unsandboxed >&2 || true)
  ls "$debs"/mesa-vulkan-drivers_25.* >/dev/null || { echo "mesa-vulkan-drivers 25 (bookworm-backports) was not downloaded" >&2; exit 1; }
  touch "$debs/.complete"
fi
gpu=$stage/.runtime/gpu
mkdir -p "$gpu/lib" "$gpu/layer" "$work/x"
for f in "$debs"/*.deb; do
  case $(basename "$f") in mesa-vulkan-drivers_*) dpkg -x "$f" "$work/mesa" ;; *) dpkg -x "$f" "$work/x" ;; esac
done
cp -a "$work"/x/usr/lib/x86_64-linux-gnu/*.so* "$gpu/lib/" 2>/dev/null || true
cp -a "$work"/x/lib/x86_64-linux-gnu/*.so* "$gpu/lib/" 2>/dev/null || true
cp "$work"/mesa/usr/lib/x86_64-linux-gnu/libVkLayer_MESA_device_select.so "$gpu/layer/"
sed 's#"library_path": *"[^"]*"#"library_path": "./libVkLayer_MESA_device_select.so"#' \
  "$work"/mesa/usr/share/vulkan/implicit_layer.d/VkLayer_MESA_device_select.json > "$gpu/layer/VkLayer_MESA_device_select.json"

cp "$root/scripts/bundle/run.sh" "$stage/run.sh"
chmod +x "$stage/run.sh"

log "compressing"
# GNU tar exits 1 when a file changed while it was read (another checkout's pnpm install touching
# the store's hard links): the archive is still complete, so only a worse status fails the build.
{ tar -C "$work" -cf - reactor || [ $? -eq 1 ]; } | xz -T0 -6 > "$out"
log "wrote $out ($(du -h "$out" | cut -f1); unpacked $(du -sh "$stage" | cut -f1))"
size=$(stat -c %s "$out")
if [ "$size" -gt $((64 * 1024 * 1024)) ]; then
  log "warning: $size bytes is over the 64 MiB a GPU-machine command carries; BUNDLE_SKIP=codec or BUNDLE_SKIP=enhance makes it smaller"
fi
