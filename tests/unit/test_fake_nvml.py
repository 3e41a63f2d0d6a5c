"""The project's own libnvidia-ml.so.1 (realnode/fakenvml), read the way the node agent reads NVML.

Each check runs in a child Python with ``LD_LIBRARY_PATH`` on the built library: pynvml loads the
library once per process, and this test process must keep the no-driver behaviour the other
tests expect. ``make test`` (and ``make fake-nvml``) build the library (gcc, and Go to fetch
go-nvml's nvml.h); where it was not built these tests are skipped, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpushare.devcluster.nvidia import (
    DEFAULT_GPUS,
    FAKE_NVML_CONFIG_ENV,
    default_uuid,
    fake_nvml_config,
    fake_nvml_lib,
)

LIB = fake_nvml_lib()

pytestmark = pytest.mark.skipif(
    not LIB.exists(),
    reason=f"{LIB} not built: run `make fake-nvml` (`make test` builds it; needs gcc and Go)",
)

INVENTORY = """
from gpushare.gpu.inventory import collect_inventory
from gpushare.gpu.nvml import PynvmlBackend
print(collect_inventory(PynvmlBackend()).to_json())
"""

# What the device plugin and go-nvlib meet beyond the inventory, through ctypes (the C ABI).
CALLS = """
import ctypes, json
lib = ctypes.CDLL("libnvidia-ml.so.1")
out = {"init": lib.nvmlInit_v2()}
dev = ctypes.c_void_p()
out["handle"] = lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev))
n = ctypes.c_uint(99)
out["count_v1"] = (lib.nvmlDeviceGetCount(ctypes.byref(n)), n.value)
mig = ctypes.c_void_p()
out["mig_by_index"] = lib.nvmlDeviceGetMigDeviceHandleByIndex(dev, 0, ctypes.byref(mig))
cur, pend = ctypes.c_uint(9), ctypes.c_uint(9)
ret = lib.nvmlDeviceGetMigMode(dev, ctypes.byref(cur), ctypes.byref(pend))
out["mig_mode"] = (ret, cur.value, pend.value)
major, minor = ctypes.c_int(), ctypes.c_int()
ret = lib.nvmlDeviceGetCudaComputeCapability(dev, ctypes.byref(major), ctypes.byref(minor))
out["cc"] = (ret, major.value, minor.value)
power = ctypes.c_uint()
out["power"] = lib.nvmlDeviceGetPowerUsage(dev, ctypes.byref(power))
out["fabric"] = lib.nvmlDeviceGetGpuFabricInfo(dev, None)
es = ctypes.c_void_p()
out["event_create"] = lib.nvmlEventSetCreate(ctypes.byref(es))
data = ctypes.create_string_buffer(64)
out["event_wait"] = lib.nvmlEventSetWait_v2(es, data, 10)
lib.nvmlErrorString.restype = ctypes.c_char_p
out["error_string"] = lib.nvmlErrorString(3).decode()
out["shutdown"] = (lib.nvmlShutdown(), lib.nvmlShutdown())
print(json.dumps(out))
"""


def _run(code: str, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LD_LIBRARY_PATH": str(LIB.parent)}
    env.pop(FAKE_NVML_CONFIG_ENV, None)
    if config is not None:
        env[FAKE_NVML_CONFIG_ENV] = str(config)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def _inventory(config: Path | None = None) -> dict[str, Any]:
    r = _run(INVENTORY, config)
    assert r.returncode == 0, r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def test_without_a_config_file_pynvml_lists_two_a100s() -> None:
    inv = _inventory()
    assert inv["state"] == "ok", inv
    assert (inv["driverVersion"], inv["cudaDriverVersion"]) == ("550.54.15", "12.4")
    assert [g["uuid"] for g in inv["gpus"]] == [default_uuid(i) for i in range(DEFAULT_GPUS)]
    assert {(g["name"], g["memoryMiB"], g["migEnabled"]) for g in inv["gpus"]} == {
        ("NVIDIA A100-SXM4-40GB", 40960, False)
    }


def test_the_config_file_names_the_gpus(tmp_path: Path) -> None:
    config = tmp_path / "gpus.conf"
    text = fake_nvml_config(3, name="NVIDIA H200", memory_mib=143771, uuids={1: "GPU-custom-1"})
    config.write_text("# three H200s\n" + text + "gpu.2.memory_mib=1024\n")
    inv = _inventory(config)
    assert inv["state"] == "ok", inv
    assert [(g["index"], g["uuid"], g["name"], g["memoryMiB"]) for g in inv["gpus"]] == [
        (0, default_uuid(0), "NVIDIA H200", 143771),
        (1, "GPU-custom-1", "NVIDIA H200", 143771),
        (2, default_uuid(2), "NVIDIA H200", 1024),
    ]


@pytest.mark.parametrize("line", ["colour=green", "count=0", "count=17", "memory_mib=lots", "gpu.x.uuid=y"])
def test_a_bad_config_file_makes_init_fail_and_says_why(tmp_path: Path, line: str) -> None:
    config = tmp_path / "gpus.conf"
    config.write_text(line + "\n")
    r = _run(INVENTORY, config)
    assert r.returncode == 0, r.stderr
    inv = json.loads(r.stdout)
    assert inv["state"] == "unknown" and "NVML init failed" in inv["error"], inv
    assert f"unknown key or bad value: {line}" in r.stderr


def test_a_missing_config_file_makes_init_fail(tmp_path: Path) -> None:
    r = _run(INVENTORY, tmp_path / "absent.conf")
    assert json.loads(r.stdout)["state"] == "unknown"
    assert "No such file or directory" in r.stderr


def test_the_calls_the_device_plugin_meets() -> None:
    r = _run(CALLS)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["init"] == 0 and out["handle"] == 0
    assert out["count_v1"] == [0, DEFAULT_GPUS]
    assert out["mig_mode"] == [0, 0, 0]  # MIG capable, disabled
    assert out["mig_by_index"] == 6  # NVML_ERROR_NOT_FOUND: no MIG device to enumerate
    assert out["cc"] == [0, 8, 0]
    # Declared in nvml.h, not implemented: NOT_SUPPORTED, never a missing symbol.
    assert out["power"] == 3 and out["fabric"] == 3
    assert out["error_string"] == "Not Supported"
    assert out["event_create"] == 0 and out["event_wait"] == 10  # NVML_ERROR_TIMEOUT
    assert out["shutdown"] == [0, 1]  # the second: NVML_ERROR_UNINITIALIZED


def test_every_function_go_nvml_may_bind_is_exported() -> None:
    """The generated stubs cover nvml.h (well over 300 functions), the versioned names included."""
    r = subprocess.run(["nm", "-D", "--defined-only", str(LIB)], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        pytest.skip(f"nm (binutils) not usable here: {r.stderr.strip()}")
    # T: implemented in fakenvml.c; W: a generated (weak) stub.
    names = {f[2] for f in (line.split() for line in r.stdout.splitlines()) if len(f) == 3 and f[1] in "TW"}
    assert len({n for n in names if n.startswith("nvml")}) > 350
    versioned = {
        "nvmlInit_v2",
        "nvmlDeviceGetCount_v2",
        "nvmlDeviceGetHandleByIndex_v2",
        "nvmlDeviceGetPciInfo_v3",
        "nvmlEventSetWait_v2",
        "nvmlDeviceGetMemoryInfo_v2",
    }
    assert versioned <= names, versioned - names
