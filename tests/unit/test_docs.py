"""The documentation site's reference pages are the code's (``make docs``; ``make lint`` checks it).

The generated pages (gpushare.docsgen) must be what the code gives now: a CRD field, a CLI flag, a
metric or an admission rule added without ``make docs`` fails here. Each test below also shows that
the generator sees such an addition (so a stale page would be caught), and that every condition
reason has its troubleshooting page and every Event the operator posts is documented.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
from pathlib import Path

import pytest
from prometheus_client import Counter

from gpushare import docsgen, metrics
from gpushare.admission import catalog
from gpushare.api import crd
from gpushare.cli import build_parser
from gpushare.policy import conditions as cond

ROOT = Path(__file__).resolve().parents[2]


def test_the_generated_reference_pages_are_current() -> None:
    assert docsgen.stale() == [], "run `make docs` and commit docs/reference/"


def test_every_generated_page_is_in_the_site_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    for path in docsgen.PAGES:
        assert path.removeprefix("docs/") in nav, path


def test_a_new_crd_field_makes_the_api_page_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    built = crd.build_crd()
    spec = built["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["newField"] = {"type": "string", "description": "added without make docs"}
    monkeypatch.setattr(docsgen, "build_crd", lambda: built)
    assert "| `newField` | string |  | added without make docs |" in docsgen.crd_page()
    assert "docs/reference/api.md" in docsgen.stale()


def test_a_new_cli_flag_makes_the_cli_page_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    def parser() -> argparse.ArgumentParser:
        p = build_parser()
        docsgen._subparsers(p)["check"].add_argument("--new-flag", help="added without make docs")
        return p

    monkeypatch.setattr(docsgen, "build_parser", parser)
    assert "`--new-flag`" in docsgen.cli_page()
    assert "docs/reference/cli.md" in docsgen.stale()


def test_a_new_metric_makes_the_metrics_page_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    new = Counter("gpushare_new_things", "added without make docs", ["pool"], registry=metrics.REGISTRY)
    try:
        monkeypatch.setattr(metrics, "NEW_THINGS", new, raising=False)
        assert "`gpushare_new_things_total` | counter | `pool`" in docsgen.metrics_page()
        assert "docs/reference/metrics.md" in docsgen.stale()
    finally:
        metrics.REGISTRY.unregister(new)


def test_a_new_rule_makes_the_rules_page_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    new = dataclasses.replace(catalog.ALL_RULES[0], id="GS999-new-rule")
    monkeypatch.setattr(catalog, "ALL_RULES", (*catalog.ALL_RULES, new))
    assert "`GS999-new-rule`" in docsgen.admission_page()
    assert "docs/reference/admission-rules.md" in docsgen.stale()


def test_a_new_condition_reason_must_be_described(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cond, "REASON_SOMETHING_NEW", "SomethingNew", raising=False)
    with pytest.raises(SystemExit, match="SomethingNew"):
        docsgen.events_page()


def test_every_reason_that_is_not_healthy_has_a_troubleshooting_page() -> None:
    """Every condition reason and every node reason (the NVIDIA backend's ConfigPropagating too)."""
    pages = ROOT / "docs" / "how-to" / "troubleshoot"
    nav = (ROOT / "mkdocs.yml").read_text()
    reasons = docsgen.reason_constants()
    assert cond.NODE_CONFIG_PROPAGATING in reasons
    for reason in sorted(reasons):
        name = docsgen.troubleshooting_page(reason)
        if name is None:
            assert reason in docsgen.HEALTHY or docsgen.NODE_REASON_PAGES[reason] is None
            continue
        page = pages / name
        assert page.is_file(), f"{reason}: no {page.relative_to(ROOT)}"
        title = docsgen.NODE_REASON_PAGES.get(reason) or reason
        assert page.read_text().startswith(f"# {title}\n"), page
        assert f"how-to/troubleshoot/{page.name}" in nav, page


def test_a_new_node_reason_must_be_given_a_page(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cond, "NODE_SOMETHING_NEW", "SomethingNew", raising=False)
    monkeypatch.setitem(docsgen.REASONS, "SomethingNew", "described, but with no page")
    with pytest.raises(SystemExit, match="NODE_REASON_PAGES"):
        docsgen.events_page()


def _emitted_event_reasons() -> set[str]:
    """Every Event reason the operator's code posts, read from its source: the first argument of
    ``Event(...)``, ``Return(...)``'s reason, the reason of ``self._event(ref, reason, ...)`` and of
    ``cluster.event(ref, reason=...)``, and the verbs of the cordon Events; constants are resolved
    through gpushare.policy.conditions."""
    found: set[str] = set()
    for path in (ROOT / "operator" / "gpushare").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "event":  # Cluster.event(ref, reason=..., ...)
                found |= {
                    str(k.value.value)
                    for k in node.keywords
                    if k.arg == "reason" and isinstance(k.value, ast.Constant)
                }
            index = {"Event": 0, "Return": 2, "_event": 1}.get(name)
            if index is None or len(node.args) <= index:
                continue
            arg = node.args[index]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.add(arg.value)
            elif isinstance(arg, ast.Attribute) and getattr(arg.value, "id", "") in ("reasons", "cond"):
                found.add(getattr(cond, arg.attr))
    found.discard("")
    return found | {"Cordoned", "Uncordoned"}  # events.write_events: Event(verb, ...) over these two


def test_every_event_the_operator_posts_is_documented() -> None:
    emitted = _emitted_event_reasons()
    assert {
        "LabelsApplied",
        "NodeLent",
        "LoanRaced",
        "InvalidSpec",
        "DevicePluginNamespaceNotAllowed",
    } <= emitted
    assert emitted == set(docsgen.EVENTS)
