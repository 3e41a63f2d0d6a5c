"""Where the control-plane binaries are (built by ``hack/build-control-plane.sh``).

The versions here must equal the defaults of that script (a unit test checks it).
``GPUSHARE_BIN`` overrides the directory, ``GPUSHARE_CACHE`` the cache root, exactly
as in the script.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

K8S_VERSION = "v1.34.4"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.7.0"

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


class BinariesMissing(Exception):
    """The control-plane binaries were not built; the message says how to build them."""


@dataclass(frozen=True)
class Binaries:
    dir: Path

    def path(self, name: str) -> str:
        return str(self.dir / name)


def default_bin_dir(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("GPUSHARE_BIN"):
        return Path(env["GPUSHARE_BIN"])
    cache = Path(env["GPUSHARE_CACHE"]) if env.get("GPUSHARE_CACHE") else Path.home() / ".cache/gpushare"
    return cache / "bin" / f"k8s-{K8S_VERSION}-etcd-{ETCD_VERSION}-kwok-{KWOK_VERSION}"


def find_binaries(bin_dir: Path | str | None = None) -> Binaries:
    """The binaries directory, or BinariesMissing naming what is absent and `make control-plane`."""
    d = Path(bin_dir) if bin_dir is not None else default_bin_dir()
    missing = [n for n in COMPONENTS if not os.access(d / n, os.X_OK)]
    if missing:
        raise BinariesMissing(
            f"control-plane binaries missing in {d}: {', '.join(missing)}; "
            "run `make control-plane` (builds them from the Go module proxy into ~/.cache/gpushare)"
        )
    return Binaries(d)
