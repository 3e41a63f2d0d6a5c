"""The wheel the image installs holds the `gpushare` package at top level, never an `operator` package."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
    )
    (found,) = out.glob("gpushare_operator-*.whl")
    return found


def test_wheel_has_gpushare_package_and_no_operator_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "gpushare/__init__.py" in names
    assert "gpushare/py.typed" in names
    assert not any(n.startswith("operator/") for n in names), (
        "a top-level 'operator' package shadows the stdlib"
    )


def test_wheel_declares_both_console_scripts(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        entry = next(n for n in zf.namelist() if n.endswith("entry_points.txt"))
        text = zf.read(entry).decode()
    assert "gpushare = gpushare.cli:run" in text
    assert "kubectl-gpushare = gpushare.cli:kubectl_plugin_main" in text


def test_operator_source_root_is_not_a_package() -> None:
    assert not (ROOT / "operator" / "__init__.py").exists()


def test_dockerfile_runs_as_numeric_non_root_user() -> None:
    text = (ROOT / "Dockerfile").read_text()
    users = [line.split()[1] for line in text.splitlines() if line.startswith("USER ")]
    assert users, "Dockerfile sets no USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0
