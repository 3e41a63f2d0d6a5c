"""The wheel the image installs holds the `gpushare` package at top level, never an `operator` package,
and not the development harness (``gpushare.devcluster``, ``gpushare.gpu.fake``) or the docs generator
(``gpushare.docsgen``), which only the editable install of ``make setup`` (tests, ``make cluster``,
``make demo``, ``make docs``) provides."""

from __future__ import annotations

import os
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


#: The development harness: in the source tree, never in the wheel.
DEV_ONLY = ("gpushare/devcluster/", "gpushare/gpu/fake.py", "gpushare/docsgen/")


def test_wheel_leaves_out_the_development_harness(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    for path in DEV_ONLY:
        assert (ROOT / "operator" / path).exists(), f"{path} moved: update DEV_ONLY and pyproject.toml"
        assert not [n for n in names if n.startswith(path)], f"{path} ships in the wheel"
    assert "gpushare/gpu/nvml.py" in names and "gpushare/agent.py" in names


def test_every_module_of_the_installed_wheel_imports_without_the_harness(wheel: Path, tmp_path: Path) -> None:
    """Installed alone (as in the image), nothing in gpushare needs the harness to import."""
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
    )
    script = """
import importlib, pkgutil, sys
import gpushare
assert gpushare.__file__.startswith(sys.argv[1]), gpushare.__file__
names = [m.name for m in pkgutil.walk_packages(gpushare.__path__, "gpushare.")]
names = [n for n in names if not n.endswith(".__main__")]
for name in names:
    importlib.import_module(name)
for name in ("gpushare.devcluster", "gpushare.gpu.fake", "gpushare.docsgen"):
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        continue
    raise SystemExit(name + " is importable from the installed wheel")
print(len(names))
"""
    # PYTHONPATH comes before site-packages, where the editable install points at operator/.
    env = {**os.environ, "PYTHONPATH": str(target)}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(target)], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) > 40, proc.stdout


def test_the_editable_install_still_provides_the_harness() -> None:
    """`make setup` installs in editable mode: the tests, `make cluster` and `make demo` import it."""
    import gpushare.devcluster
    import gpushare.gpu.fake

    assert Path(gpushare.devcluster.__file__).is_relative_to(ROOT / "operator")
    assert Path(gpushare.gpu.fake.__file__).is_relative_to(ROOT / "operator")


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
