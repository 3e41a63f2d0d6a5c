"""Every YAML block in README.md and the getting-started pages of the site is valid, and every
`$ gpushare ...` transcript in them is what runs."""

from __future__ import annotations

import contextlib
import io
import itertools
import re
import shlex
from pathlib import Path

import pytest

from gpushare.admission import Context, evaluate
from gpushare.api import parse_pool
from gpushare.cli import main
from gpushare.objectfiles import load_text

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
#: The pages a newcomer copies commands from: README and the site's getting-started path.
PAGES = [
    "README.md",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "getting-started").glob("*.md")),
]
TEXTS = {page: (ROOT / page).read_text() for page in PAGES}


def _blocks(lang: str, page: str | None = None) -> list[str]:
    """The ``lang`` blocks of one page, or of every page in PAGES."""
    pages = [page] if page else PAGES
    return [b for p in pages for b in re.findall(rf"^```{lang}\n(.*?)^```", TEXTS[p], flags=re.S | re.M)]


def _yaml_blocks() -> list[tuple[str, int]]:
    return [(page, i) for page in PAGES for i in range(len(_blocks("yaml", page)))]


def test_readme_has_yaml_and_console_blocks() -> None:
    assert _blocks("yaml", "README.md"), "README lost its API example"
    assert any("$ gpushare" in b for b in _blocks("console", "README.md"))
    assert "docs/getting-started/first-pool.md" in PAGES and "docs/getting-started/install.md" in PAGES


@pytest.mark.parametrize(("page", "index"), _yaml_blocks(), ids=lambda v: str(v))
def test_yaml_block_is_valid(page: str, index: int) -> None:
    objects = load_text(_blocks("yaml", page)[index], f"{page} yaml block {index + 1}")
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


#: Repository paths as the pages write them (in commands, links and prose).
_PATH = re.compile(
    r"(?<![\w/.-])((?:examples|manifests|charts|docs|hack|crds|tests|operator|bench|requirements)/[\w./-]*)"
)


def test_every_file_readme_shows_exists() -> None:
    """A newcomer copies the pages' commands: every repository path in them must be there (README
    once showed a `pool-a.yaml` of its transcript that the repository did not have)."""
    paths = {p.rstrip(".,:;)") for text in TEXTS.values() for p in _PATH.findall(text)}
    assert "examples/first-use/pool-cgpu-spread.yaml" in paths
    # and every file a command in a block reads with -f
    for block in _blocks("console") + _blocks("text"):
        for line in block.splitlines():
            command = line.removeprefix("$ ")
            if not command.startswith(("gpushare ", "kubectl ")):
                continue  # output, or another command
            words = shlex.split(command.split("  #")[0].split("|")[0].split(";")[0])
            paths |= {w for prev, w in itertools.pairwise(words) if prev == "-f" and "<" not in w}
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert missing == []


def test_readme_uninstall_deletes_pools_before_the_operator_and_never_the_crds_first() -> None:
    """The documented uninstall blocks (run as written by tests/integration/test_install_uninstall.py):
    pools first, while the operator runs; the CRDs last, and never through `-k manifests/`."""
    blocks = [b for b in _blocks("console", "README.md") if "kubectl delete" in b or "helm uninstall" in b]
    commands = [[line.split("  #")[0].strip() for line in b.splitlines() if line.strip()] for b in blocks]
    helm = next(c for c in commands if any(x.startswith("helm uninstall") for x in c))
    kustomize = next(c for c in commands if "kubectl delete -k manifests/" in c)
    for steps, operator in ((helm, "helm uninstall"), (kustomize, "kubectl delete -k manifests/")):
        at = next(i for i, x in enumerate(steps) if x.startswith(operator))
        assert steps[0] == "kubectl delete gsp --all" and at == 1, steps
        assert all("crd" in x for x in steps[at + 1 :]), steps
    kust = (ROOT / "manifests" / "kustomization.yaml").read_text()
    assert "- crd" not in kust.splitlines(), (
        "manifests/ must not include the CRDs (its delete would delete the pools)"
    )


def test_readme_development_section_shows_the_development_run() -> None:
    """The namespace step and the command (once only in docs/concepts/admission.md), in that order."""
    dev = README[README.index("## Development") :]
    block = next(b for b in _blocks("console", "README.md") if "--webhook-local" in b and b in dev)
    lines = [line.split("  #")[0].strip() for line in block.splitlines()]
    ns = lines.index("kubectl create namespace gpushare-system")
    run = next(i for i, x in enumerate(lines) if x.endswith("gpushare run --webhook --webhook-local"))
    assert lines[0] == "make cluster" and ns < run
