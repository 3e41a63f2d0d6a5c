"""Child processes that die with their parent.

Each component runs in its own process group (so a stop reaches any helpers it forks)
with ``PR_SET_PDEATHSIG=SIGKILL``: when the process that started it dies, even by
``kill -9``, the kernel kills the component, so no orphan keeps a port bound.

The death signal follows the *thread* that forked the child: start components from a
thread that lives as long as the cluster (the main thread in pytest and in the CLI).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def _pdeathsig_preexec(parent_pid: int) -> Callable[[], None]:
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:  # runs in the child between fork and exec
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


class DevClusterError(Exception):
    """The control plane (or a real node) did not come up; the message names the component and its
    log."""


@dataclass
class Process:
    """One running component: its argv, log file and Popen handle."""

    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def start(self, env: dict[str, str] | None = None) -> None:
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                process_group=0,
                preexec_fn=_pdeathsig_preexec(os.getpid()),  # sets PR_SET_PDEATHSIG
                close_fds=True,
            )

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL after ``timeout`` seconds."""
        if self.popen is None:
            return
        pgid = self.popen.pid
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
                self.popen.wait(5)
        # Reap anything else left in the group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)

    def log_tail(self, lines: int = 25) -> str:
        return tail(self.log_path, lines)


def tail(path: Path, lines: int = 25) -> str:
    try:
        data = path.read_bytes()[-64 * 1024 :]
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


def stop_all(procs: Sequence[Process], timeout: float = 10.0) -> None:
    """Stop in reverse start order."""
    for proc in reversed(procs):
        proc.stop(timeout)


def wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
