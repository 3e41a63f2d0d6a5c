"""The image's dependency locks (requirements/*.txt, `make lock`) are hash-pinned and match pyproject.toml.

The Dockerfile installs only from them with ``--require-hashes --only-binary=:all:``; here we
check offline that every entry is pinned with ``==`` and carries hashes, and that every
dependency of pyproject.toml (and the build backend) is in the lock at a version it accepts. A
dependency added to pyproject.toml without `make lock` fails here before it fails the image build.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def _entries(path: Path) -> dict[str, tuple[Version, list[str]]]:
    """name → (pinned version, hashes), from a `uv pip compile --generate-hashes` file."""
    text = re.sub(r"\\\n", " ", path.read_text())  # join continuation lines
    out: dict[str, tuple[Version, list[str]]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        spec, _, rest = line.partition(" --hash")
        req = Requirement(spec.split(" --")[0].strip())
        (pin,) = req.specifier
        assert pin.operator == "==", f"{path.name}: {req.name} is not pinned with ==: {line[:80]}"
        hashes = HASH.findall("--hash" + rest)
        out[canonicalize_name(req.name)] = (Version(pin.version), hashes)
    return out


@pytest.mark.parametrize("name", ["image.txt", "build.txt"])
def test_every_locked_package_is_pinned_with_hashes(name: str) -> None:
    entries = _entries(ROOT / "requirements" / name)
    assert entries
    for pkg, (_, hashes) in entries.items():
        assert hashes, f"requirements/{name}: {pkg} has no --hash"


def test_the_image_lock_satisfies_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    locked = _entries(ROOT / "requirements" / "image.txt")
    for raw in project["project"]["dependencies"]:
        req = Requirement(raw)
        got = locked.get(canonicalize_name(req.name))
        assert got is not None, (
            f"{req.name} is in pyproject.toml but not in requirements/image.txt: run make lock"
        )
        assert req.specifier.contains(got[0]), (
            f"requirements/image.txt has {req.name}=={got[0]}, pyproject wants {raw}"
        )
    build = _entries(ROOT / "requirements" / "build.txt")
    for raw in project["build-system"]["requires"]:
        req = Requirement(raw)
        got = build.get(canonicalize_name(req.name))
        assert got is not None and req.specifier.contains(got[0]), f"requirements/build.txt lacks {raw}"


def test_the_dockerfile_installs_only_from_the_locks() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    installs = [line for line in dockerfile.splitlines() if "pip install" in line]
    assert installs
    for line in installs:
        locked = "--require-hashes --only-binary=:all: -r requirements/" in line
        own_wheel = "--no-deps /tmp/dist/" in line
        assert locked or own_wheel, f"Dockerfile installs something unlocked: {line.strip()}"
    assert "--no-build-isolation" in dockerfile  # the build backend comes from build.txt too
