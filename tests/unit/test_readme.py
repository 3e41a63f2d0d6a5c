"""Every YAML block in README.md is valid, and every `$ gpushare ...` transcript in it is what runs."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from gpushare.admission import Context, evaluate
from gpushare.api import parse_pool
from gpushare.cli import main
from gpushare.manifests import load_text

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", README, flags=re.S | re.M)


def test_readme_has_yaml_and_console_blocks() -> None:
    assert _blocks("yaml"), "README lost its API example"
    assert any("$ gpushare" in b for b in _blocks("console"))


@pytest.mark.parametrize("index", range(len(_blocks("yaml"))))
def test_yaml_block_is_valid(index: int) -> None:
    objects = load_text(_blocks("yaml")[index], f"README.md yaml block {index + 1}")
    assert objects
    pools = [parse_pool(o) for o in objects if o["kind"] == "GPUSharePool"]
    ctx = Context.build(pools=pools)
    for obj in objects:
        denials = [f for f in evaluate(obj, ctx) if f.verdict == "deny"]
        assert not denials, denials


def _transcripts() -> list[tuple[str, str]]:
    """(command, expected output) for each `$ gpushare ...` line; `$ echo $?` adds `EXIT` + the code."""
    out: list[tuple[str, list[str]]] = []
    for block in _blocks("console"):
        current: list[str] | None = None
        for line in block.splitlines():
            if line == "$ echo $?" and current is not None:
                current.append("EXIT")
            elif line.startswith("$ gpushare "):
                current = []
                out.append((line[2:], current))
            elif line.startswith("$ "):
                current = None
            elif current is not None:
                current.append(line)
    return [(cmd, "\n".join(lines)) for cmd, lines in out]


@pytest.mark.parametrize(("command", "expected"), _transcripts(), ids=lambda v: v[:60])
def test_console_transcript_is_current(command: str, expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    argv = shlex.split(command)[1:]
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(argv)
    lines = expected.splitlines()
    if "EXIT" in lines:
        at = lines.index("EXIT")
        assert str(code) == lines[at + 1]
        lines = lines[:at]
    assert stdout.getvalue().rstrip("\n").splitlines() == lines
