"""The hand-written pages cannot state what the code no longer does (``make docs``; ``make lint``).

The lists that drift are generated into ``docs/snippets/`` (gpushare.docsgen.snippets) and included
in the pages: the owned labels, the ``kubectl get gsp`` columns, the policies' rules, the alerts,
the chart's values and the compatibility matrix. ``test_docs.py`` fails when a snippet is stale;
the tests here fail when a page stops including one, when a page says in its own words a count,
a column header, a policy's rule list, an alert name or a manifest the code contradicts, and show
that each generator follows a change of its source.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpushare import constants as c
from gpushare import docsgen
from gpushare.admission import vap
from gpushare.api import crd, parse_pool
from gpushare.backends import BACKENDS
from gpushare.docsgen import snippets
from gpushare.docsgen.snippets import DASH
from gpushare.gpu.inventory import AGENT_LABELS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: Hand-written pages: README, the chart's README and the site's pages (not the generated ones).
PAGES = {
    str(p.relative_to(ROOT)): p.read_text()
    for p in [
        ROOT / "README.md",
        ROOT / snippets.CHART_README,
        *sorted(DOCS.rglob("*.md")),
    ]
    if not p.is_relative_to(DOCS / "reference") and not p.is_relative_to(DOCS / "snippets")
}

_WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
]


def _number(word: str) -> int | None:
    word = word.lower()
    if word.isdigit():
        return int(word)
    return _WORDS.index(word) if word in _WORDS else None


# --- snippets are included where the facts are stated ---------------------------------------------

#: Each snippet and the pages that must include it.
INCLUDED_IN = {
    "owned-labels.md": ["docs/concepts/ack-labels.md"],
    "gsp-columns.md": ["docs/getting-started/first-pool.md", "docs/concepts/pools.md"],
    "policy-rules.md": ["docs/how-to/without-webhook.md"],
    "alerts.md": ["docs/how-to/monitoring.md"],
    "helm-values.md": ["docs/getting-started/install.md"],
    "compatibility.md": ["docs/compatibility.md"],
}


def test_every_snippet_is_included_where_its_facts_are_stated() -> None:
    assert {Path(p).name for p in snippets.SNIPPETS} == set(INCLUDED_IN)
    for name, pages in INCLUDED_IN.items():
        for page in pages:
            assert f'--8<-- "{name}"' in PAGES[page], f"{page} no longer includes docs/snippets/{name}"


def test_the_owned_labels_shown_are_the_operators() -> None:
    """The snippet lists the backends' owned labels and the pool label: exactly MANAGED_LABELS,
    the labels the operator may write (and its node restriction policy allows)."""
    from gpushare.backends import OWNED_LABELS

    assert set(OWNED_LABELS) == set(c.MANAGED_LABELS)
    text = snippets.owned_labels()
    assert [k for k in c.MANAGED_LABELS if f"| `{k}` |" not in text] == []


# --- counts written in words ----------------------------------------------------------------------

ACK = BACKENDS["ack"]
#: A phrase that states a count, and the count the code gives.
COUNTED: list[tuple[str, int, str]] = [
    (r"only the (\w+) (?:labels )?it owns", len(c.MANAGED_LABELS), "constants.MANAGED_LABELS"),
    (
        r"\b(\w+) labels (?:it|the operator|gpushare) (?:owns|manages|may write)",
        len(c.MANAGED_LABELS),
        "MANAGED_LABELS",
    ),
    (r"agent reads its own Node and merge-patches (\w+) labels", len(AGENT_LABELS), "AGENT_LABELS"),
    (r"\bACK's (\w+) labels", len(ACK.owned_labels), "the ACK backend's owned_labels"),
    (
        r"\b(\w+) node labels its device plugin reads",
        len(ACK.plugin_labels),
        "the ACK backend's plugin_labels",
    ),
    (r"`hash` of the (\w+) labels the device plugin reads", len(ACK.plugin_labels), "ACK plugin_labels"),
    (
        r"`PrometheusRule` with (\w+) alerts",
        len(snippets.alerts()),
        "manifests/monitoring/prometheusrule.yaml",
    ),
]


def _wrong_counts(texts: dict[str, str]) -> list[str]:
    return [
        f"{page}: {match[0]!r}, but {source} has {expected}"
        for page, text in texts.items()
        for pattern, expected, source in COUNTED
        for match in re.finditer(pattern, " ".join(text.split()), flags=re.I)
        if _number(match[1]) not in (None, expected)
    ]


def test_counts_in_the_pages_are_the_codes() -> None:
    assert _wrong_counts(PAGES) == []


def test_a_wrong_count_is_caught_and_every_phrase_is_still_used() -> None:
    assert _wrong_counts({"x.md": "reconciles node labels (only the five it owns)"}) == [
        "x.md: 'only the five it owns', but constants.MANAGED_LABELS has 7"
    ]
    flat = " ".join(" ".join(t.split()) for t in PAGES.values())
    unused = [p for p, _, _ in COUNTED if not re.search(p, flat, flags=re.I)]
    assert unused == [], "a phrase no page says any more: drop it from COUNTED"


# --- kubectl get gsp ------------------------------------------------------------------------------


def test_every_kubectl_get_gsp_header_shown_is_the_crds() -> None:
    columns = snippets.printer_columns()
    headers = [
        (page, after.split())
        for page, text in PAGES.items()
        for line, after in itertools.pairwise(text.splitlines())
        if re.fullmatch(r"\$ kubectl get (gsp|gpusharepools?)( +#.*)?", line.strip())
        and not after.startswith("$")
    ]
    assert headers, "no `kubectl get gsp` output left to check"
    assert [(page, h) for page, h in headers if h != columns] == []


def test_a_new_printer_column_changes_the_snippet(monkeypatch: pytest.MonkeyPatch) -> None:
    built = crd.build_crd()
    built["spec"]["versions"][0]["additionalPrinterColumns"].insert(
        0, {"name": "Placement", "type": "string", "jsonPath": ".spec.placement"}
    )
    monkeypatch.setattr(snippets, "build_crd", lambda: built)
    assert snippets.printer_columns()[:3] == ["NAME", "PLACEMENT", "SCHEDULE"]
    assert "docs/snippets/gsp-columns.md" in docsgen.stale()


# --- the policies' rules --------------------------------------------------------------------------

_POLICY_LIST = re.compile(
    rf"stateless rules?\W{{0,3}}((?:GS\d{{3}}(?:\s*[{DASH}-]\s*GS\d{{3}})?(?:,\s*|\s+and\s+)?)+)"
)


def _wrong_rule_lists(texts: dict[str, str]) -> list[str]:
    held = {int(i[2:5]) for i in vap.POLICY_RULES}
    return [
        f"{page}: {match[0]!r}, but the policies hold {snippets.rule_list(vap.POLICY_RULES)}"
        for page, text in texts.items()
        for match in _POLICY_LIST.finditer(" ".join(text.split()))
        if snippets.parse_rule_list(match[1]) != held
    ]


def test_every_list_of_the_policies_rules_is_the_codes() -> None:
    assert _wrong_rule_lists(PAGES) == []
    assert sum(len(_POLICY_LIST.findall(" ".join(t.split()))) for t in PAGES.values()) >= 3


def test_a_stale_rule_list_is_caught() -> None:
    text = f"the stateless rules GS001{DASH}GS004, GS006, GS012 on workload templates"
    assert len(_wrong_rule_lists({"x.md": text})) == 1
    assert snippets.parse_rule_list(snippets.rule_list(vap.POLICY_RULES)) == {
        int(i[2:5]) for i in vap.POLICY_RULES
    }
    assert (
        snippets.rule_list(["GS001-a", "GS002-b", "GS003-c", "GS006-d", "GS007-e"])
        == f"GS001{DASH}GS003, GS006, GS007"
    )


# --- alerts ---------------------------------------------------------------------------------------


def test_every_alert_a_page_names_ships() -> None:
    shipped = {r["alert"] for r in snippets.alerts()}
    named = {
        (page, name)
        for page, text in PAGES.items()
        for name in re.findall(r"`(GPUShare\w+)`", text)
        if name != c.KIND  # the kind, not an alert
    }
    assert sorted((page, name) for page, name in named if name not in shipped) == []


def test_a_new_alert_changes_the_snippet(monkeypatch: pytest.MonkeyPatch) -> None:
    more = [*snippets.alerts(), {"alert": "GPUShareNew", "labels": {"severity": "info"}, "for": "1m"}]
    monkeypatch.setattr(snippets, "alerts", lambda: more)
    assert "`GPUShareNew`" in snippets.alerts_snippet()
    assert "docs/snippets/alerts.md" in docsgen.stale()


# --- manifests ------------------------------------------------------------------------------------


def _kustomized(directory: Path) -> set[str]:
    """Every file a kustomization includes, following its directories."""
    kust = yaml.safe_load((directory / "kustomization.yaml").read_text())
    out: set[str] = set()
    for entry in kust.get("resources") or []:
        path = directory / entry
        out |= _kustomized(path) if path.is_dir() else {str(path.relative_to(ROOT))}
    return out


def test_the_install_pages_manifest_table_lists_every_manifest() -> None:
    text = PAGES["docs/getting-started/install.md"]
    table = text[text.index("| File | Objects |") :]
    table = table[: table.index("\n\n")]
    listed = {
        m
        for row in table.splitlines()[2:]
        for m in re.findall(r"`(manifests/[\w./-]+\.yaml)`", row.split(" | ")[0])
    }
    shipped = _kustomized(ROOT / "manifests") | _kustomized(ROOT / "manifests" / "crd")
    shipped |= {"manifests/webhook/policy.yaml", "manifests/webhook/policy-pods.yaml"}  # applied apart
    assert sorted(shipped - listed) == [], "manifests the install page does not list"
    assert sorted(listed - shipped) == [], "files the install page lists that are not shipped"


# --- chart values ---------------------------------------------------------------------------------


def test_every_chart_value_has_a_comment() -> None:
    values = snippets.chart_values()
    assert len(values) > 40
    assert [v.path for v in values if not v.comment] == [], "say in values.yaml what each value sets"


def test_the_values_table_follows_values_yaml() -> None:
    text = "# What a sets.\na:\n  # b's comment\n  b: 1\n  c: [x]\n  # closes the block, not d's\nd: {}\n"
    rows = [(v.path, v.default, v.comment) for v in snippets.chart_values(text)]
    assert rows == [("a.b", "1", "b's comment"), ("a.c", "[x]", "What a sets."), ("d", "{}", "")]


def test_a_new_value_makes_the_values_snippet_and_the_chart_readme_stale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = snippets.VALUES.read_text() + "# Added without make docs.\nnewValue: 1\n"
    original = snippets.chart_values
    monkeypatch.setattr(snippets, "chart_values", lambda t=None: original(text if t is None else t))
    assert "| `newValue` | `1` | Added without make docs. |" in snippets.values_snippet()
    assert {"docs/snippets/helm-values.md", snippets.CHART_README} <= set(docsgen.stale())


# --- compatibility --------------------------------------------------------------------------------


def test_a_new_pinned_version_makes_the_compatibility_matrix_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    pinned = snippets.pinned_versions()
    assert pinned["nvidia-plugin"].startswith("v0.") and pinned["kubernetes"].startswith("v1.")
    monkeypatch.setattr(snippets, "pinned_versions", lambda: {**pinned, "kubernetes": "v1.99.0"})
    assert "| v1.99.0 (etcd" in snippets.compatibility()
    assert "docs/snippets/compatibility.md" in docsgen.stale()


def test_a_version_no_longer_pinned_where_it_was_fails_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snippets, "ROOT", ROOT / "tests")  # no hack/ there
    with pytest.raises((SystemExit, FileNotFoundError)):
        snippets.pinned_versions()


# --- pools shown in the pages ---------------------------------------------------------------------


def _pools_shown() -> list[tuple[str, dict[str, Any]]]:
    """Every GPUSharePool a page shows in a ``yaml`` block (as parsed)."""
    return [
        (page, doc)
        for page, text in PAGES.items()
        for block in re.findall(r"^```yaml\n(.*?)^```", text, flags=re.S | re.M)
        for doc in yaml.safe_load_all(block)
        if isinstance(doc, dict) and doc.get("kind") == c.KIND
    ]


def test_every_nvidia_pool_shown_is_valid_and_none_selects_by_a_label_gfd_rewrites() -> None:
    """GPU Feature Discovery appends -SHARED to nvidia.com/gpu.product on a shared node: a pool
    selecting by it would stop selecting its own nodes."""
    pools = _pools_shown()
    nvidia = [(page, doc) for page, doc in pools if "nvidia" in (doc.get("spec") or {})]
    assert {page for page, _ in nvidia} >= {"docs/how-to/nvidia-time-slicing.md", "docs/how-to/nvidia-mps.md"}
    for page, doc in pools:
        parse_pool(doc)  # raises on an invalid pool
        assert "nvidia.com/gpu.product" not in yaml.safe_dump(doc["spec"]), page
    flat = " ".join(" ".join(t.split()) for t in PAGES.values())
    assert not re.search(r"nodeSelector: \{matchLabels: \{nvidia\.com/gpu\.product", flat)


# --- versions -------------------------------------------------------------------------------------


def test_every_version_a_page_names_is_one_the_build_scripts_pin() -> None:
    """kube-apiserver v1.34.4, NVIDIA's plugin v0.19.3...: a bumped pin must take the pages along
    (k8s.io staging modules are v0.N.P for Kubernetes v1.N.P; go.mod's placeholder v0.0.0)."""
    pinned = set(snippets.pinned_versions().values())
    kube = snippets.pinned_versions()["kubernetes"]
    allowed = {v for v in pinned if v.startswith("v")} | {"v0." + kube.removeprefix("v1."), "v0.0.0"}
    named = {
        (page, v)
        for page, text in PAGES.items()
        for v in re.findall(r"(?<![\w.])v\d+\.\d+\.\d+(?![\w.])", text)
    }
    assert len(named) > 5
    assert sorted((page, v) for page, v in named if v not in allowed) == []
