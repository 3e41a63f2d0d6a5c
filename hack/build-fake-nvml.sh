#!/usr/bin/env bash
# Builds the project's own libnvidia-ml.so.1 (realnode/fakenvml: NVML pretending GPUs on a machine
# without one) into a driver root for the real node: build/realnode/driver-root/usr/lib64/.
# NVIDIA's device plugin finds it there through --driver-root-ctr-path (its search path includes
# <root>/usr/lib64); pynvml through LD_LIBRARY_PATH.
#
# nvml.h is the one shipped by the go-nvml module the plugin is built with (realnode/nvidia/go.mod),
# so the library declares every function that go-nvml may bind: genstubs.py writes a weak
# NOT_SUPPORTED stub for each, fakenvml.c implements the ones the plugin and the agent use.
# Needs Go (to fetch the module; no compilation), python3 and a C compiler. Under a second.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${GPUSHARE_REALNODE_BIN:-$REPO/build/realnode}/driver-root/usr/lib64"
CC="${CC:-gcc}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" GOFLAGS="${GOFLAGS:--trimpath}"
log() { printf '[build-fake-nvml] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "Go is required (to fetch go-nvml's nvml.h from the module proxy); none found on PATH"; exit 1; }
command -v "$CC" >/dev/null || { log "a C compiler ($CC) is required; none found on PATH"; exit 1; }
dir=$(cd "$REPO/realnode/nvidia" && go mod download -json github.com/NVIDIA/go-nvml \
  | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or sys.exit("go mod download: " + d.get("Error", "no Dir")))')
header="$dir/pkg/nvml/nvml.h"
[ -f "$header" ] || { log "no nvml.h at $header"; exit 1; }
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
python3 "$REPO/realnode/fakenvml/genstubs.py" "$header" "$gen/stubs.c"
mkdir -p "$OUT"
"$CC" -shared -fPIC -O2 -std=gnu11 -Wall -Wextra -Werror -Wno-unused-parameter \
  -I"$dir/pkg/nvml" -Wl,-soname,libnvidia-ml.so.1 -Wl,--no-undefined \
  -o "$OUT/libnvidia-ml.so.1.tmp" "$REPO/realnode/fakenvml/fakenvml.c" "$gen/stubs.c" -lpthread
mv "$OUT/libnvidia-ml.so.1.tmp" "$OUT/libnvidia-ml.so.1"
ln -sf libnvidia-ml.so.1 "$OUT/libnvidia-ml.so"
log "$OUT/libnvidia-ml.so.1: $(nm -D --defined-only "$OUT/libnvidia-ml.so.1" | grep -c ' nvml') NVML functions"
