"""One version: pyproject.toml. Everything else reads it, or a test here holds it to it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

import gpushare
from gpushare.cli import main

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE_TAG = re.compile(r"gpushare-operator:(\d+\.\d+\.\d+[0-9A-Za-z.+-]*)")


def test_package_reads_the_pyproject_version() -> None:
    # The editable install's metadata is refreshed by `make setup` whenever pyproject.toml changes.
    assert gpushare.__version__ == VERSION


def test_cli_version(capsys: object) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpushare", "--version"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"gpushare {VERSION}"


def test_kubectl_plugin_version(capsys: object) -> None:
    try:
        main(["--version"], prog="kubectl gpushare")
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert out.strip() == f"kubectl gpushare {VERSION}"


def test_kustomize_image_tags_match() -> None:
    checked = []
    for path in sorted((ROOT / "manifests").rglob("kustomization.yaml")):
        doc = yaml.safe_load(path.read_text())
        for image in doc.get("images") or []:
            if image["name"] == "gpushare-operator":
                rel = path.relative_to(ROOT)
                assert str(image["newTag"]) == VERSION, f"{rel}: newTag must be {VERSION} (pyproject.toml)"
                checked.append(str(rel))
    assert "manifests/kustomization.yaml" in checked and len(checked) >= 3, checked


def test_every_image_reference_in_the_repo_matches() -> None:
    """Docs, manifests and scripts that name the image by tag name this version."""
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    wrong: list[str] = []
    seen = 0
    for rel in files:
        path = ROOT / rel
        if path.suffix not in {".md", ".yaml", ".yml", ".sh", ".py", ".json", ""} or not path.is_file():
            continue
        if rel == "CHANGELOG.md":  # history names older versions on purpose
            continue
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for tag in IMAGE_TAG.findall(line):
                seen += 1
                if tag != VERSION:
                    wrong.append(f"{rel}:{lineno}: gpushare-operator:{tag}")
    assert seen > 0
    assert not wrong, f"image tags other than {VERSION} (pyproject.toml):\n" + "\n".join(wrong)


def test_changelog_has_this_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in text
    assert re.search(rf"^## \[{re.escape(VERSION)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", text, re.M), (
        f"CHANGELOG.md has no '## [{VERSION}] - YYYY-MM-DD' section"
    )
