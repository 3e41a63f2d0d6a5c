"""MIG in the project's own libnvidia-ml.so.1 (realnode/fakenvml), through pynvml and ctypes.

As in test_fake_nvml.py, each check runs in a child Python with ``LD_LIBRARY_PATH`` on the built
library. MIG state lives in the file named by GPUSHARE_FAKE_NVML_MIG_STATE; separate processes
share it, which is what these checks lean on (one child writes, the next reads).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpushare.devcluster.nvidia import FAKE_NVML_CONFIG_ENV, FAKE_NVML_MIG_STATE_ENV, fake_nvml_lib

LIB = fake_nvml_lib()

pytestmark = pytest.mark.skipif(
    not LIB.exists(),
    reason=f"{LIB} not built: run `make fake-nvml` (`make test` builds it; needs gcc and Go)",
)

# Enables MIG on GPU 0 and creates GPU and compute instances; prints each step's NVML code.
CREATE = """
import json, pynvml as n
n.nvmlInit()
d = n.nvmlDeviceGetHandleByIndex(0)
out = {}
def code(f, *a):
    try:
        return [0, f(*a)]
    except n.NVMLError as e:
        return [e.value, None]
out["enable"] = code(n.nvmlDeviceSetMigMode, d, 1)[0]
out["mode"] = n.nvmlDeviceGetMigMode(d)
gis = []
# Smallest first: each takes the first free placement (1g.5gb at 0 and 1, 2g.10gb at 2, 3g.20gb at 4).
# Largest first would leave the second 1g.5gb only memory slice 7, where no 1g.5gb may start.
for profile in (n.NVML_GPU_INSTANCE_PROFILE_1_SLICE, n.NVML_GPU_INSTANCE_PROFILE_1_SLICE,
                n.NVML_GPU_INSTANCE_PROFILE_2_SLICE, n.NVML_GPU_INSTANCE_PROFILE_3_SLICE):
    info = n.nvmlDeviceGetGpuInstanceProfileInfo(d, profile)
    r, gi = code(n.nvmlDeviceCreateGpuInstance, d, info.id)
    gis.append(gi)
    if r == 0:  # one compute instance over the whole GPU instance (1, 2, 3 slices: profiles 0, 1, 2)
        ci = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, info.sliceCount - 1, 0)
        code(n.nvmlGpuInstanceCreateComputeInstance, gi, ci.id)
# 1 + 1 + 2 + 3 compute slices, 1 + 1 + 2 + 4 memory slices: the GPU is full
full = n.nvmlDeviceGetGpuInstanceProfileInfo(d, n.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
out["one_more"] = code(n.nvmlDeviceCreateGpuInstance, d, full.id)[0]
out["disable_with_instances"] = code(n.nvmlDeviceSetMigMode, d, 0)[0]
out["destroy_gi_with_ci"] = code(n.nvmlGpuInstanceDestroy, gis[0])[0]
print(json.dumps(out))
"""

# Lists GPU 0's MIG devices as the node agent and the device plugin read them.
LIST = """
import json, pynvml as n
n.nvmlInit()
d = n.nvmlDeviceGetHandleByIndex(0)
devices = []
for i in range(n.nvmlDeviceGetMaxMigDeviceCount(d)):
    try:
        m = n.nvmlDeviceGetMigDeviceHandleByIndex(d, i)
    except n.NVMLError_NotFound:
        continue
    a = n.nvmlDeviceGetAttributes(m)
    parent = n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)
    devices.append({
        "uuid": n.nvmlDeviceGetUUID(m), "name": n.nvmlDeviceGetName(m),
        "gi": n.nvmlDeviceGetGpuInstanceId(m), "ci": n.nvmlDeviceGetComputeInstanceId(m),
        "slices": a.gpuInstanceSliceCount, "memoryMiB": n.nvmlDeviceGetMemoryInfo(m).total >> 20,
        "isMig": getattr(n.nvmlDeviceIsMigDeviceHandle(m), "value", None),
        "parent": n.nvmlDeviceGetUUID(parent),
        "byUuid": n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByUUID(n.nvmlDeviceGetUUID(m))),
    })
print(json.dumps({"mode": n.nvmlDeviceGetMigMode(d), "devices": devices, "gpu": n.nvmlDeviceGetUUID(d)}))
"""


def _run(code: str, state: Path | None) -> dict[str, Any]:
    env = {**os.environ, "LD_LIBRARY_PATH": str(LIB.parent)}
    env.pop(FAKE_NVML_CONFIG_ENV, None)
    env.pop(FAKE_NVML_MIG_STATE_ENV, None)
    if state is not None:
        env[FAKE_NVML_MIG_STATE_ENV] = str(state)
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert r.returncode == 0, r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def test_without_a_state_file_mig_stays_disabled_and_cannot_be_enabled() -> None:
    out = _run(CREATE.split("gis = []")[0] + "print(json.dumps(out))", None)
    assert out == {"enable": 3, "mode": [0, 0]}  # NVML_ERROR_NOT_SUPPORTED, as before MIG was modelled
    assert _run(LIST, None)["devices"] == []


def test_instances_respect_the_slots_and_other_processes_see_them(tmp_path: Path) -> None:
    state = tmp_path / "mig.state"
    out = _run(CREATE, state)
    assert out["enable"] == 0 and out["mode"] == [1, 1]
    assert out["one_more"] == 23  # NVML_ERROR_INSUFFICIENT_RESOURCES: all 7 compute slices are taken
    assert out["disable_with_instances"] == 19  # NVML_ERROR_IN_USE
    assert out["destroy_gi_with_ci"] == 19  # a GPU instance with a compute instance in it

    listed = _run(LIST, state)
    devices = listed["devices"]
    assert [(d["gi"], d["ci"], d["slices"], d["memoryMiB"]) for d in devices] == [
        (1, 0, 1, 4864),
        (2, 0, 1, 4864),
        (3, 0, 2, 9856),
        (4, 0, 3, 19968),
    ]
    assert [d["name"] for d in devices] == [
        "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
        "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
        "NVIDIA A100-SXM4-40GB MIG 2g.10gb",
        "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
    ]
    uuids = [d["uuid"] for d in devices]
    assert all(u.startswith("MIG-") and len(u) == 40 for u in uuids) and len(set(uuids)) == 4
    assert all(d["isMig"] == 1 and d["parent"] == listed["gpu"] for d in devices)
    assert [d["byUuid"] for d in devices] == uuids
    assert "gi 0 4 2 4\n" in state.read_text()  # GPU 0, id 4, the 3-slice profile at memory slice 4


def test_a_placement_must_be_one_of_the_profile_and_free(tmp_path: Path) -> None:
    code = """
import ctypes, json
lib = ctypes.CDLL("libnvidia-ml.so.1")
class Placement(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]
lib.nvmlInit_v2()
d = ctypes.c_void_p()
lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(d))
status = ctypes.c_int()
out = {"enable": lib.nvmlDeviceSetMigMode(d, 1, ctypes.byref(status))}
gi = ctypes.c_void_p()
THREE = 2  # NVML_GPU_INSTANCE_PROFILE_3_SLICE: placements at memory slices 0 and 4, 4 wide
def place(start, size):
    at = ctypes.byref(Placement(start, size))
    return lib.nvmlDeviceCreateGpuInstanceWithPlacement(d, THREE, at, ctypes.byref(gi))
out["at_4"] = place(4, 4)
out["at_4_again"] = place(4, 4)
out["at_2"] = place(2, 4)
n = ctypes.c_uint()
ret = lib.nvmlDeviceGetGpuInstanceRemainingCapacity(d, THREE, ctypes.byref(n))
out["remaining_3g"] = (ret, n.value)
out["destroy"] = lib.nvmlGpuInstanceDestroy(gi)
out["destroy_again"] = lib.nvmlGpuInstanceDestroy(gi)
print(json.dumps(out))
"""
    out = _run(code, tmp_path / "mig.state")
    assert out == {
        "enable": 0,
        "at_4": 0,
        "at_4_again": 23,  # taken: NVML_ERROR_INSUFFICIENT_RESOURCES
        "at_2": 2,  # not a placement of the profile: NVML_ERROR_INVALID_ARGUMENT
        "remaining_3g": [0, 1],
        "destroy": 0,
        "destroy_again": 2,
    }
