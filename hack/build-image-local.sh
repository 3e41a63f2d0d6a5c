#!/usr/bin/env bash
# make image-local: the product's image (what the Dockerfile builds: gpushare and its locked
# dependencies in a venv at /opt/gpushare, uid 65532, entrypoint gpushare) without a Docker
# engine or a registry, as a one-layer docker-archive for `ctr images import` (the real-node tier).
#
#  1. Base (once, cached): `debootstrap` a minimal Debian 12 (bookworm: python3.11, python3-venv)
#     into $CACHE/image/base-bookworm-python3 (root; installs Debian's debootstrap when missing).
#  2. Wheels (cached): the hash-pinned locks requirements/image.txt (wheels only) downloaded into
#     $CACHE/image/wheels; gpushare's own wheel built with the locked hatchling (requirements/build.txt).
#  3. A copy of the base; in it (chroot) a venv /opt/gpushare with the locks and the wheel,
#     installed offline from those wheels; `pip check`; the passwd entry of uid 65532.
#  4. The tree packed with tar into one layer and written as a docker-archive (images.pack_layer).
#
# The archive is cached by a key over the locks, pyproject.toml and operator/ (less the devcluster,
# which the wheel leaves out): a second run with nothing changed prints its path at once. Prints the archive's path on its last line.
# Environment: GPUSHARE_CACHE (default ~/.cache/gpushare), VENV (default .venv), IMAGE_REF
# (default localhost/gpushare-operator:<version>), DEBIAN_MIRROR.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
CACHE="${GPUSHARE_CACHE:-$HOME/.cache/gpushare}"
IMG="$CACHE/image"
VENV="${VENV:-$REPO/.venv}"
SUITE=bookworm
BASE="$IMG/base-$SUITE-python3"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -1)"
REF="${IMAGE_REF:-localhost/gpushare-operator:$VERSION}"

die() { echo "image-local: $*" >&2; exit 1; }
say() { echo "image-local: $*" >&2; }

[[ "$(id -u)" == 0 ]] || die "needs root (debootstrap, chroot); run as root"
[[ -x "$VENV/bin/python" ]] || die "$VENV/bin/python not found: run 'make setup'"

key="$( { echo "$REF"; cat requirements/image.txt requirements/build.txt pyproject.toml README.md;
          find operator -type f -name '*.py' -not -path '*/devcluster/*' -print0 | sort -z \
            | xargs -0 sha256sum; } | sha256sum | cut -c1-16)"
OUT="$IMG/gpushare-operator-$VERSION-$key.tar"
if [[ -s "$OUT" ]]; then
  say "cached $REF"
  echo "$OUT"
  exit 0
fi
started=$SECONDS
mkdir -p "$IMG"

if [[ ! -f "$BASE/.complete" ]]; then
  if ! command -v debootstrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian's debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null; } \
      || true
  fi
  command -v debootstrap >/dev/null 2>&1 || die "debootstrap not found (apt-get install -y debootstrap)"
  say "debootstrap a minimal Debian $SUITE with python3 into $BASE (once)"
  rm -rf "$BASE.partial"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$SUITE" "$BASE.partial" "$MIRROR" >"$IMG/debootstrap.log" 2>&1 \
    || die "debootstrap failed; log: $IMG/debootstrap.log"
  rm -rf "$BASE.partial"/var/lib/apt/lists/* "$BASE.partial"/var/cache/apt/*.bin \
    "$BASE.partial"/var/cache/apt/archives/*.deb
  touch "$BASE.partial/.complete"
  rm -rf "$BASE"
  mv "$BASE.partial" "$BASE"
fi

BUILD_VENV="$IMG/build-venv"
if [[ ! -x "$BUILD_VENV/bin/hatchling" ]]; then
  say "the locked build backend into $BUILD_VENV"
  rm -rf "$BUILD_VENV"
  "$VENV/bin/python" -m venv "$BUILD_VENV"
  "$BUILD_VENV/bin/pip" install -q --disable-pip-version-check --require-hashes --only-binary=:all: \
    -r requirements/build.txt
fi
say "wheels of requirements/image.txt into $IMG/wheels"
"$BUILD_VENV/bin/pip" download -q --disable-pip-version-check --require-hashes --only-binary=:all: \
  -r requirements/image.txt -d "$IMG/wheels"

WORK="$IMG/rootfs.partial"
rm -rf "$WORK" "$IMG/layer.tar"
trap 'rm -rf "$WORK" "$IMG/layer.tar"' EXIT
cp -a "$BASE" "$WORK"
rm -f "$WORK/.complete"
mkdir -p "$WORK/tmp/build"
"$BUILD_VENV/bin/pip" wheel -q --disable-pip-version-check --no-deps --no-build-isolation \
  -w "$WORK/tmp/build" . >/dev/null
cp requirements/image.txt "$WORK/tmp/build/"
cp -a "$IMG/wheels" "$WORK/tmp/build/wheels"
say "venv /opt/gpushare in the image (offline, from the locked wheels)"
wheel="$(cd "$WORK/tmp/build" && ls gpushare_operator-*.whl)"
inroot() { chroot "$WORK" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"; }
inroot /usr/bin/python3 -m venv /opt/gpushare
pipi() { inroot PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 /opt/gpushare/bin/pip "$@"; }
pipi install -q --no-index --find-links /tmp/build/wheels --no-compile --require-hashes \
  --only-binary=:all: -r /tmp/build/image.txt
pipi install -q --no-index --no-compile --no-deps "/tmp/build/$wheel"
pipi check >/dev/null
inroot /opt/gpushare/bin/python -c "import gpushare, kopf, pynvml, kubernetes_asyncio"
rm -rf "$WORK/tmp/build"
find "$WORK/opt/gpushare" -name __pycache__ -type d -prune -exec rm -rf {} +
# Non-root, numeric (runAsNonRoot verifies it), with a passwd entry (Kopf's peering identity).
echo 'gpushare:x:65532:65532:gpushare:/nonexistent:/usr/sbin/nologin' >>"$WORK/etc/passwd"
echo 'gpushare:x:65532:' >>"$WORK/etc/group"

say "packing $REF"
tar --numeric-owner --sort=name --mtime=@0 -C "$WORK" \
  --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' --exclude='./run/*' \
  -cf "$IMG/layer.tar" .
rm -f "$IMG"/gpushare-operator-*.tar   # one cached archive: the newest
"$VENV/bin/python" - "$REF" "$IMG/layer.tar" "$OUT" <<'EOF'
import sys
from pathlib import Path

from gpushare.devcluster.images import pack_layer

ref, layer, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
pack_layer(
    ref, layer, out,
    entrypoint=["gpushare"], cmd=["run"], user="65532:65532",
    env=[
        "PATH=/opt/gpushare/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1", "LANG=C.UTF-8",
    ],
    created_by="hack/build-image-local.sh",
)
EOF
say "built $REF in $((SECONDS - started))s, $(du -m "$OUT" | cut -f1) MB"
echo "$OUT"
