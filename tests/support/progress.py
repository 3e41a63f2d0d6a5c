"""A progress line with an estimate for long test runs (``make test``; hooks in tests/conftest.py).

pytest prints a line per file with the percentage done; a run of the integration tests still
takes many minutes, so ``make test`` (GPUSHARE_TEST_PROGRESS=1) adds, at most once every
``GPUSHARE_TEST_PROGRESS_EVERY`` seconds (default 60), how many tests ran, for how long, and
about how long the rest takes at the pace so far.

Every run's summary also ends with the real-node tier's line (``realnode_line``): how many of its
tests passed, failed, errored or were skipped, or ``NOT RUN`` and why.
"""

from __future__ import annotations

from collections.abc import Mapping


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


# --- the real-node tier's line in the summary ---------------------------------------------------


def realnode_off_reason(environ: Mapping[str, str]) -> str:
    """Why the real-node tier was left out, naming the variable and where it was set.

    ``make test`` passes ``GPUSHARE_REAL_NODES_ORIGIN=$(origin REAL_NODES)``: ``environment`` when
    REAL_NODES=0 was exported in the shell (easy to forget), ``command line`` for
    ``make test REAL_NODES=0``. pytest run directly only reads GPUSHARE_REAL_NODES.
    """
    origin = environ.get("GPUSHARE_REAL_NODES_ORIGIN", "")
    if origin.startswith("environment"):
        return "REAL_NODES=0 is exported in the environment (`unset REAL_NODES` to run it)"
    if origin == "command line":
        return "REAL_NODES=0 on make's command line"
    if origin:
        return f"REAL_NODES=0 (set in the {origin})"
    return "GPUSHARE_REAL_NODES=0 is exported in the environment (`unset GPUSHARE_REAL_NODES` to run it)"


#: The order in which the tier's outcomes are named; a test counts once, by its worst phase.
REALNODE_OUTCOMES = ("passed", "failed", "error", "skipped")


def realnode_line(outcomes: Mapping[str, int], *, deselected: int = 0, off_reason: str | None = None) -> str:
    """``real-node tier: 7 passed`` (failures, errors and skips named beside, never counted as
    passed), or ``real-node tier: NOT RUN: <why>``."""
    if off_reason is not None:
        return f"real-node tier: NOT RUN: {off_reason}; {deselected} real-node test(s) deselected"
    if not sum(outcomes.values()):
        return "real-node tier: NOT RUN: no real-node test was selected (paths, -m or -k)"
    parts = [f"{outcomes.get('passed', 0)} passed"]
    parts += [f"{outcomes[k]} {k}" for k in REALNODE_OUTCOMES[1:] if outcomes.get(k)]
    return "real-node tier: " + ", ".join(parts)


def realnode_outcome(when: str, outcome: str, previous: str | None) -> str | None:
    """One test's outcome after one more phase's report (setup, call, teardown): a failed setup or
    teardown is an error, a failed call a failure, and a pass never hides either."""
    if outcome == "failed":
        new = "failed" if when == "call" else "error"
    elif outcome == "skipped":
        new = "skipped"
    elif when == "call":
        new = "passed"
    else:
        return previous
    if previous in ("failed", "error") and new in ("passed", "skipped"):
        return previous
    if previous == "failed" and new == "error":
        return previous
    return new
