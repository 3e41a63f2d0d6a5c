"""hack/e2e-kind.sh (make e2e-kind) without a Docker engine or kind: it says SKIPPED and that nothing
was tested, exits 0, and does nothing else (no image build, no cluster)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "e2e-kind.sh"


def _fake_bin(tmp_path: Path, **scripts: str) -> Path:
    """A bin dir with the given commands (name -> shell body); every call is logged to calls.log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in scripts.items():
        exe = bin_dir / name
        exe.write_text(f'#!/bin/bash\necho "{name} $*" >> {tmp_path}/calls.log\n{body}\n')
        exe.chmod(0o755)
    dirname = shutil.which("dirname")
    assert dirname is not None
    (bin_dir / "dirname").symlink_to(dirname)  # the only external command before the checks
    return bin_dir


def _run(tmp_path: Path, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    # PATH has only the fake commands: no real docker or kind can be found
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    bash = shutil.which("bash")
    assert bash is not None
    return subprocess.run([bash, str(SCRIPT)], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def _calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def test_docker_engine_not_running_is_skipped_loudly(tmp_path: Path) -> None:
    bin_dir = _fake_bin(tmp_path, docker='[[ "$1" == info ]] && exit 1; exit 99', kind="exit 99")
    r = _run(tmp_path, bin_dir)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (
        "e2e-kind: SKIPPED — no Docker engine (docker info failed); nothing was tested"
    )
    assert _calls(tmp_path) == ["docker info"]  # no build, no kind cluster


def test_kind_missing_is_skipped_loudly(tmp_path: Path) -> None:
    bin_dir = _fake_bin(tmp_path, docker='[[ "$1" == info ]] && exit 0; exit 99')
    r = _run(tmp_path, bin_dir)
    assert r.returncode == 0, r.stderr
    assert "e2e-kind: SKIPPED — kind not found on PATH" in r.stdout
    assert r.stdout.rstrip().endswith("nothing was tested")
    assert _calls(tmp_path) == ["docker info"]


def test_docker_missing_is_skipped_loudly(tmp_path: Path) -> None:
    r = _run(tmp_path, _fake_bin(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (
        "e2e-kind: SKIPPED — no Docker engine (docker not found on PATH); nothing was tested"
    )
