"""What a module of NVIDIA's plugin on the real node needs before it starts its control plane."""

from __future__ import annotations

import pytest

from gpushare.devcluster import BinariesMissing, find_binaries, nfd
from gpushare.devcluster import nvidia as nv
from gpushare.devcluster.realnode import RealNodeUnavailable, preflight


def require_nvidia_real_node() -> None:
    """Fail the module (never skip it) when the real node, NVIDIA's programs, NFD or the project's
    NVML library cannot run here, naming what is missing and the make target that builds it."""
    try:
        find_binaries()
        preflight(1)
    except (BinariesMissing, RealNodeUnavailable) as exc:
        pytest.fail(f"real-node tier cannot run: {exc}", pytrace=False)
    missing = [
        f"{p} (make {target})"
        for p, target in (
            *((nv.plugin_bin_dir() / program, "nvidia-plugin") for program in nv.PROGRAMS),
            (nfd.bin_dir() / "nfd-master", "nfd"),
            (nv.fake_nvml_lib(), "fake-nvml"),
        )
        if not p.exists()
    ]
    if missing:
        pytest.fail(
            f"NVIDIA's plugin on the real node cannot run: missing {', '.join(missing)}", pytrace=False
        )
