"""Collection rules and fixtures shared by every test directory.

tests/e2e/ runs only against a deployed cluster (``make e2e-kind`` sets GPUSHARE_E2E=1 and
KUBECONFIG). Without GPUSHARE_E2E it is not collected at all, so ``make test`` neither runs it nor
reports it as skipped or passed.

``helm_bin``: the helm binary for the chart's tests, built by hack/build-helm.sh into
~/.cache/gpushare (``make helm``; ``make test`` builds it first). Without it those tests FAIL
with that message; they are never skipped.

``make test`` sets GPUSHARE_TEST_PROGRESS=1: the run then says what it is about to run and, at most
once a minute, how far it is with an estimate of the time left (``support.progress``).

``tests/support/`` holds helpers that more than one test module uses (the tests run with
``--import-mode=importlib``, so a test module cannot import another): ``tests/`` goes on
``sys.path`` here, so they import as ``support.kube``, ``support.operator_proc``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))

collect_ignore: list[str] = [] if os.environ.get("GPUSHARE_E2E") == "1" else ["e2e"]

#: ``make test REAL_NODES=0`` (GPUSHARE_REAL_NODES=0): the real-node tier (tests marked ``realnode``)
#: is deselected, never skipped, and the summary says it did not run and why (an exported
#: REAL_NODES=0 is named). When it runs, the summary says how many of its tests passed.
REAL_NODES_OFF = os.environ.get("GPUSHARE_REAL_NODES") == "0"
_REALNODE_DESELECTED = pytest.StashKey[int]()
#: nodeid -> outcome of each real-node test that ran (``support.progress.realnode_outcome``).
_REALNODE_OUTCOMES: dict[str, str] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not REAL_NODES_OFF:
        return
    drop = [item for item in items if item.get_closest_marker("realnode")]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if not item.get_closest_marker("realnode")]
    config.stash[_REALNODE_DESELECTED] = len(drop)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "realnode" not in report.keywords:
        return
    from support.progress import realnode_outcome

    new = realnode_outcome(report.when, report.outcome, _REALNODE_OUTCOMES.get(report.nodeid))
    if new is not None:
        _REALNODE_OUTCOMES[report.nodeid] = new


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    from support.progress import realnode_line, realnode_off_reason

    outcomes = Counter(_REALNODE_OUTCOMES.values())
    off = realnode_off_reason(os.environ) if REAL_NODES_OFF else None
    line = realnode_line(outcomes, deselected=config.stash.get(_REALNODE_DESELECTED, 0), off_reason=off)
    clean = off is None and outcomes["passed"] and outcomes["passed"] == sum(outcomes.values())
    terminalreporter.write_line(line, green=bool(clean), red=not clean, bold=True)


@pytest.fixture(scope="session")
def helm_bin() -> str:
    """Path of the helm binary: $GPUSHARE_HELM, else the one hack/build-helm.sh built."""
    if os.environ.get("GPUSHARE_HELM"):
        return os.environ["GPUSHARE_HELM"]
    proc = subprocess.run(
        ["bash", str(REPO / "hack" / "build-helm.sh"), "--print-bin", "--no-build"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.fail(proc.stderr.strip() or "helm is not built: run 'make helm'", pytrace=False)
    return proc.stdout.strip()


# --- progress (make test) ---------------------------------------------------------------------

_PROGRESS: dict[str, Any] = {}


def _every() -> int:
    return int(os.environ.get("GPUSHARE_TEST_PROGRESS_EVERY", "60"))


def pytest_collection_finish(session: pytest.Session) -> None:
    if os.environ.get("GPUSHARE_TEST_PROGRESS") != "1" or session.config.option.collectonly:
        return
    from support.progress import plan_line

    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    integration = sum(1 for item in session.items if item.get_closest_marker("integration"))
    now = time.monotonic()
    _PROGRESS.update(reporter=reporter, total=len(session.items), done=0, start=now, last=now)
    reporter.write_line(plan_line(len(session.items), integration, _every()))


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    if not _PROGRESS:
        return
    from support.progress import progress_line

    _PROGRESS["done"] += 1
    now = time.monotonic()
    if now - _PROGRESS["last"] < _every():
        return
    _PROGRESS["last"] = now
    _PROGRESS["reporter"].write_line(
        progress_line(_PROGRESS["done"], _PROGRESS["total"], now - _PROGRESS["start"])
    )
