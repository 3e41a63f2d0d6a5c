"""A progress line with an estimate for long test runs (``make test``; hooks in tests/conftest.py).

pytest prints a line per file with the percentage done; a run of the integration tests still
takes many minutes, so ``make test`` (GPUSHARE_TEST_PROGRESS=1) adds, at most once every
``GPUSHARE_TEST_PROGRESS_EVERY`` seconds (default 60), how many tests ran, for how long, and
about how long the rest takes at the pace so far.
"""

from __future__ import annotations


def duration(seconds: float) -> str:
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def progress_line(done: int, total: int, elapsed: float) -> str:
    """``[make test] 120/880 tests in 4m10s, about 26m25s left at this pace``."""
    line = f"[make test] {done}/{total} tests in {duration(elapsed)}"
    if 0 < done < total:
        line += f", about {duration(elapsed * (total - done) / done)} left at this pace"
    return line


def plan_line(total: int, integration: int, every: int) -> str:
    """What the run is about to do."""
    unit = total - integration
    parts = []
    if integration:
        parts.append(
            f"{integration} integration tests against a local control plane (etcd, kube-apiserver, "
            "kube-controller-manager, kube-scheduler, kwok; started once, about 20 s)"
        )
    if unit:
        parts.append(f"{unit} unit and property tests (about a minute)")
    return f"[make test] {total} tests: " + ", then ".join(parts) + f"; progress every {every} s"
