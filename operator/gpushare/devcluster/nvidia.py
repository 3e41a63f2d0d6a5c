"""NVIDIA's real device plugin and config-manager on the real node, over the project's own NVML.

No GPU here, so the GPUs come from ``libnvidia-ml.so.1`` of the project's own
(``realnode/fakenvml``, ``make fake-nvml``): it pretends the GPUs of a small key=value file whose
path is in ``GPUSHARE_FAKE_NVML_CONFIG`` (default: 2 x A100-SXM4-40GB). It lies in a driver root
(``build/realnode/driver-root/usr/lib64``), mounted into the plugin's pod as NVIDIA's Helm chart
mounts the host's driver root: at ``/driver-root``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from gpushare.devcluster.realnode import REPO, programs_dir

#: Environment variable naming the fake library's GPU file (read by realnode/fakenvml at init).
FAKE_NVML_CONFIG_ENV = "GPUSHARE_FAKE_NVML_CONFIG"
#: The UUID of the fake library's GPU ``i`` when its file does not name one.
DEFAULT_UUID_PREFIX = "GPU-fa4e0000-0000-4000-8000-"
DEFAULT_GPUS = 2


def default_uuid(index: int) -> str:
    return f"{DEFAULT_UUID_PREFIX}{index:012x}"


def plugin_version() -> str:
    """The k8s-device-plugin version realnode/nvidia/go.mod pins (the cache key of its build)."""
    for line in (REPO / "realnode/nvidia/go.mod").read_text().splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "github.com/NVIDIA/k8s-device-plugin":
            return words[1]
    raise RuntimeError("realnode/nvidia/go.mod does not require github.com/NVIDIA/k8s-device-plugin")


def plugin_bin_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where ``make nvidia-plugin`` puts nvidia-device-plugin and config-manager."""
    env = os.environ if environ is None else environ
    if env.get("GPUSHARE_NVIDIA_PLUGIN_BIN"):
        return Path(env["GPUSHARE_NVIDIA_PLUGIN_BIN"])
    cache = Path(env["GPUSHARE_CACHE"]) if env.get("GPUSHARE_CACHE") else Path.home() / ".cache/gpushare"
    return cache / "bin" / f"nvidia-device-plugin-{plugin_version()}"


def driver_root(environ: Mapping[str, str] | None = None) -> Path:
    """The fake driver root: ``usr/lib64/libnvidia-ml.so.1`` in it (``make fake-nvml``)."""
    return programs_dir(environ) / "driver-root"


def fake_nvml_lib(environ: Mapping[str, str] | None = None) -> Path:
    return driver_root(environ) / "usr/lib64/libnvidia-ml.so.1"


def fake_nvml_config(
    count: int = DEFAULT_GPUS,
    *,
    name: str | None = None,
    memory_mib: int | None = None,
    uuids: Mapping[int, str] | None = None,
) -> str:
    """The text of a fake library's GPU file (realnode/fakenvml/fakenvml.c documents its keys)."""
    lines = [f"count={count}"]
    if name is not None:
        lines.append(f"name={name}")
    if memory_mib is not None:
        lines.append(f"memory_mib={memory_mib}")
    lines += [f"gpu.{i}.uuid={uuid}" for i, uuid in sorted((uuids or {}).items())]
    return "\n".join(lines) + "\n"
