"""The site's pages are for users: no run dates, commit hashes or issue numbers of this project in
``docs/`` (the CHANGELOG, outside it, is the history). An upstream issue cited as a source, such as
``gpu-operator #262``, is fine: it names its project.

A commit hash is any hex word of 7 to 40 characters that names a commit of this repository (asked
of git itself, so content hashes such as ``gpushare-ts4-159673af`` pass), or one written after
"commit", "on" or "since".
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = {str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "docs").rglob("*.md"))}

DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
#: this project's issues and pull requests: "issue 35", "issues 14 and 35", "PR #12", "(#35)"
ISSUE = re.compile(r"\b(?:[Ii]ssues?|PRs?|[Pp]ull requests?)\s+#?\d+|(?:^|[\s(\[,;])#\d+\b", re.M)
#: an upstream citation: a project (or owner/repo) right before the number
UPSTREAM = re.compile(r"[\w.-]+(?:/[\w.-]+)?\s?#\d+")
HEX = re.compile(r"(?<![\w/-])[0-9a-f]{7,40}(?![\w-])")
NAMED_COMMIT = re.compile(r"\b(?:commit|on|since|at|before|after)\s+`?([0-9a-f]{7,40})\b")


def _commits(words: set[str]) -> set[str]:
    """The words git resolves to a commit of this repository."""
    if not words:
        return set()
    ordered = sorted(words)
    out = subprocess.run(
        ["git", "cat-file", "--batch-check"],
        cwd=ROOT,
        input="".join(f"{w}\n" for w in ordered),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return {w for w, line in zip(ordered, out, strict=True) if line.split()[1:2] == ["commit"]}


def findings(pages: dict[str, str]) -> list[str]:
    found = []
    hexes: dict[str, set[str]] = {}
    for page, text in pages.items():
        found += [f"{page}: date {m[0]}" for m in DATE.finditer(text)]
        for m in ISSUE.finditer(text):
            start = max(0, m.start() - 40)
            if not UPSTREAM.search(text[start : m.end()].split("\n")[-1]) or re.match(
                r"\W*[Ii]ssue|\W*PR", m[0]
            ):
                found.append(f"{page}: issue {m[0].strip()!r}")
        found += [f"{page}: commit {m[1]}" for m in NAMED_COMMIT.finditer(text)]
        for m in HEX.finditer(text):
            if re.search(r"\d", m[0]) and re.search(r"[a-f]", m[0]):
                hexes.setdefault(m[0], set()).add(page)
    for word in _commits(set(hexes)):
        found += [f"{page}: commit {word}" for page in sorted(hexes[word])]
    return sorted(set(found))


def test_no_run_date_commit_hash_or_issue_number_in_docs() -> None:
    assert findings(PAGES) == []


def test_each_kind_of_evidence_is_caught() -> None:
    head = subprocess.run(
        ["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    page = {
        "x.md": f"Run of 2026-12-04 on {head}, after issue 35 (#35).\n"
        f"A hash alone: {head}.\nUpstream: gpu-operator #262 and kubernetes/kubernetes#1234.\n"
        "A config name: `gpushare-ts4-159673af`; a UUID GPU-5f3c1e0a-8a8e-4f7b.\n"
    }
    assert findings(page) == sorted(
        {
            "x.md: date 2026-12-04",
            f"x.md: commit {head}",
            "x.md: issue 'issue 35'",
            "x.md: issue '(#35'",
        }
    )
