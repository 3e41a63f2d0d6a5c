"""hack/demo.sh fails clearly, without starting anything, when it cannot run (the full run is
tests/integration/test_demo.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "demo.sh"


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=REPO,
        env={**os.environ, "DEMO_DIR": str(tmp_path / "demo"), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_script_parses() -> None:
    r = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_unknown_command_is_a_usage_error(tmp_path: Path) -> None:
    r = _run(tmp_path, "sideways")
    assert r.returncode == 2
    assert "usage:" in r.stderr and "[up|down]" in r.stderr


def test_up_without_the_venv_fails_and_says_make_setup(tmp_path: Path) -> None:
    r = _run(tmp_path, "up", VENV=str(tmp_path / "no-venv"))
    assert r.returncode == 1
    assert "demo: FAILED:" in r.stderr and "run 'make setup'" in r.stderr
    assert not (tmp_path / "demo" / "supervisor.pid").exists()


def test_up_without_kubectl_fails_before_starting_anything(tmp_path: Path) -> None:
    r = _run(tmp_path, "up", KUBECTL="kubectl-that-does-not-exist")
    assert r.returncode == 1
    assert "kubectl-that-does-not-exist not found on PATH" in r.stderr
    assert not (tmp_path / "demo" / "supervisor.pid").exists()
