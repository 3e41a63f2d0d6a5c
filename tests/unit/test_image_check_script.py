"""hack/image-check.sh (make image-check) without a Docker engine: it says "skipped, no engine" and
that nothing was built or run, exits 0, never says PASSED, and does nothing else.

The real run (build and run the image) needs an engine; its transcript is in
docs/getting-started/install.md."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "image-check.sh"


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
    (bin_dir / "dirname").symlink_to(dirname)  # the only external command before the engine check
    return bin_dir


def _run(tmp_path: Path, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}  # no real docker or dockerd can be found
    bash = shutil.which("bash")
    assert bash is not None
    return subprocess.run([bash, str(SCRIPT)], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def _calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def test_no_docker_at_all_is_skipped_not_passed(tmp_path: Path) -> None:
    r = _run(tmp_path, _fake_bin(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (
        "image-check: skipped, no engine (docker not found on PATH); nothing was built or run"
    )
    assert "PASSED" not in r.stdout + r.stderr


def test_engine_down_and_no_dockerd_is_skipped_without_building(tmp_path: Path) -> None:
    bin_dir = _fake_bin(tmp_path, docker='[[ "$1" == info ]] && exit 1; exit 99')
    r = _run(tmp_path, bin_dir)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (
        "image-check: skipped, no engine (docker info failed and no dockerd to start); "
        "nothing was built or run"
    )
    assert "PASSED" not in r.stdout + r.stderr
    assert _calls(tmp_path) == ["docker info"]  # no build, no run, no cluster


def test_a_full_run_is_the_only_way_to_print_passed() -> None:
    text = SCRIPT.read_text()
    assert text.count('echo "image-check: PASSED') == 1
    # PASSED is the script's last command: every check above it dies on failure (set -e, die).
    assert text.rstrip().splitlines()[-1].startswith('echo "image-check: PASSED')
    assert "set -euo pipefail" in text
