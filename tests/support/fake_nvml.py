"""The project's fake NVML library read as another process reads it: through pynvml, over a MIG
state file (one home for the MIG tests of the library, mig-parted and the real node)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpushare.devcluster.nvidia import FAKE_NVML_CONFIG_ENV, FAKE_NVML_MIG_STATE_ENV, fake_nvml_lib

#: Prints the MIG devices pynvml enumerates: [gpu index, profile, MIG UUID], as JSON.
PYNVML_MIG = """
import json, pynvml as n
n.nvmlInit()
out = []
for g in range(n.nvmlDeviceGetCount()):
    d = n.nvmlDeviceGetHandleByIndex(g)
    for i in range(n.nvmlDeviceGetMaxMigDeviceCount(d)):
        try:
            m = n.nvmlDeviceGetMigDeviceHandleByIndex(d, i)
        except n.NVMLError_NotFound:
            continue
        out.append([g, n.nvmlDeviceGetName(m).rsplit(" ", 1)[1], n.nvmlDeviceGetUUID(m)])
print(json.dumps(out))
"""


def fake_nvml_env(state: Path) -> dict[str, str]:
    """This process's environment with the library first and ``state`` as its MIG state file (its
    default GPUs: 2 x A100-SXM4-40GB)."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_nvml_lib().parent), FAKE_NVML_MIG_STATE_ENV: str(state)}
    env.pop(FAKE_NVML_CONFIG_ENV, None)
    return env


def pynvml_mig_devices(state: Path) -> list[list[Any]]:
    """The MIG devices pynvml enumerates over ``state``: [gpu index, profile, MIG UUID] each."""
    seen = subprocess.run(
        [sys.executable, "-c", PYNVML_MIG],
        capture_output=True,
        text=True,
        timeout=60,
        env=fake_nvml_env(state),
        check=False,
    )
    assert seen.returncode == 0, seen.stderr
    devices: list[list[Any]] = json.loads(seen.stdout)
    return devices
