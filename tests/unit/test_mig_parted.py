"""NVIDIA's nvidia-mig-parted over the project's libnvidia-ml.so.1, without the kubelet.

mig-parted (``make mig-parted``, part of ``make realnode``) runs in hack/mig-ns.sh's mount
namespace, which lays out what it reads besides NVML (an ``nvidia`` line in /proc/modules, NVIDIA
PCI devices in sysfs). It applies a mixed geometry through the library's MIG state file; its own
``export`` and ``assert`` read it back, and pynvml in another process enumerates the same MIG
devices, and so does the node agent's inventory (``collect_inventory`` over the project's NVML
wrapper). A geometry that the A100's slots cannot hold fails. Skipped, saying why, without the
library, the binaries, root or unshare(1).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpushare.devcluster.nvidia import MIG_STATE_FILE, fake_nvml_lib, mig_parted, mig_parted_bin_dir
from support.fake_nvml import fake_nvml_env, pynvml_mig_devices

REPO = Path(__file__).resolve().parents[2]
LIB = fake_nvml_lib()
MIG_PARTED = mig_parted_bin_dir() / "nvidia-mig-parted"

pytestmark = [
    pytest.mark.skipif(not LIB.exists(), reason=f"{LIB} not built: run `make fake-nvml`"),
    pytest.mark.skipif(not MIG_PARTED.exists(), reason=f"{MIG_PARTED} not built: run `make mig-parted`"),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare(1)"
    ),
]

GEOMETRY = {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
CONFIG = {
    "version": "v1",
    "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "mixed": [{"devices": "all", "mig-enabled": True, "mig-devices": GEOMETRY}],
        # 3 + 3 + 2 compute slices: one more than the A100 has
        "too-big": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.20gb": 2, "2g.10gb": 1}}],
    },
}

INVENTORY = """
from gpushare.gpu.inventory import collect_inventory
from gpushare.gpu.nvml import PynvmlBackend
print(collect_inventory(PynvmlBackend()).to_json())
"""


def _mig_parted(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "hack/mig-ns.sh"), "--", str(MIG_PARTED), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=fake_nvml_env(state),
        check=False,
    )


def test_mig_parted_applies_a_mixed_geometry_that_pynvml_then_sees(tmp_path: Path) -> None:
    state, config = tmp_path / "mig.state", tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))

    before = _mig_parted(state, "export")
    assert before.returncode == 0, before.stderr
    assert yaml.safe_load(before.stdout)["mig-configs"]["current"] == [
        {"devices": "all", "mig-enabled": False, "mig-devices": {}}
    ]
    assert _mig_parted(state, "assert", "-f", str(config), "-c", "mixed").returncode != 0

    applied = _mig_parted(state, "apply", "-f", str(config), "-c", "mixed")
    assert applied.returncode == 0, applied.stderr
    assert "MIG configuration applied successfully" in applied.stdout + applied.stderr

    exported = _mig_parted(state, "export")
    assert exported.returncode == 0, exported.stderr
    assert yaml.safe_load(exported.stdout)["mig-configs"]["current"] == [
        {"devices": "all", "mig-enabled": True, "mig-devices": GEOMETRY}
    ]
    asserted = _mig_parted(state, "assert", "-f", str(config), "-c", "mixed")
    assert asserted.returncode == 0, asserted.stderr

    # The agent's view: another process, through pynvml, over the same state file.
    seen = pynvml_mig_devices(state)
    for gpu in (0, 1):
        names = sorted(name for g, name, _ in seen if g == gpu)
        assert names == ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]
    uuids = [uuid for _, _, uuid in seen]
    assert len(set(uuids)) == 8 and all(u.startswith("MIG-") for u in uuids)

    too_big = _mig_parted(state, "apply", "-f", str(config), "-c", "too-big")
    assert too_big.returncode != 0
    assert "ERROR_INSUFFICIENT_RESOURCES" in too_big.stderr
    assert _mig_parted(state, "assert", "-f", str(config), "-c", "too-big").returncode != 0

    back = _mig_parted(state, "apply", "-f", str(config), "-c", "all-disabled")
    assert back.returncode == 0, back.stderr
    assert "mig 0 0\nmig 1 0\n" in state.read_text()


def test_the_agents_inventory_lists_the_mig_devices_that_mig_parted_made(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))

    def inventory() -> str:
        r = subprocess.run(
            [sys.executable, "-c", INVENTORY],
            capture_output=True,
            text=True,
            timeout=60,
            env=fake_nvml_env(tmp_path / MIG_STATE_FILE),
            check=False,
        )
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    before = inventory()
    assert all("migDevices" not in gpu for gpu in json.loads(before)["gpus"])
    applied = mig_parted(tmp_path, "apply", "-f", str(config), "-c", "mixed")
    assert applied.returncode == 0, applied.stderr

    inv = json.loads(inventory())
    assert inv["state"] == "ok", inv
    assert len(inv["gpus"]) == 2
    for gpu in inv["gpus"]:
        assert gpu["migEnabled"] is True and gpu["memoryMiB"] == 40960
        devices = gpu["migDevices"]
        assert sorted(d["profile"] for d in devices) == ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]
        assert {d["profile"]: d["memoryMiB"] for d in devices} == {
            "1g.5gb": 4864,
            "2g.10gb": 9856,
            "3g.20gb": 19968,
        }
        ids = [(d["gpuInstanceId"], d["computeInstanceId"]) for d in devices]
        assert ids == sorted(set(ids)) and all(ci == 0 for _, ci in ids)
    uuids = [d["uuid"] for gpu in inv["gpus"] for d in gpu["migDevices"]]
    assert len(set(uuids)) == 8 and all(u.startswith("MIG-") for u in uuids)

    back = mig_parted(tmp_path, "apply", "-f", str(config), "-c", "all-disabled")
    assert back.returncode == 0, back.stderr
    assert inventory() == before  # the same devices again: the same JSON, so the agent writes nothing
