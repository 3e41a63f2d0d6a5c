"""The real kubelet node's containers seen from the host (they run as processes here)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable, Iterator
from pathlib import Path


def container_pids(container_id: str) -> list[int]:
    """The host PIDs of the container ``container_id`` (``containerd://<id>`` or the bare id):
    its processes' cgroup paths name the container's id."""
    cid = container_id.rpartition("//")[2]
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if cid in (proc / "cgroup").read_text():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


@contextlib.contextmanager
def frozen(pids: Iterable[int]) -> Iterator[list[int]]:
    """SIGSTOP each process for the block, SIGCONT on the way out (also when the block fails)."""
    stopped: list[int] = []
    try:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
        yield stopped
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
