"""policy.pooldiff: the spec part of `gpushare plan -f` (defaults filled in on both sides)."""

from __future__ import annotations

from typing import Any

from gpushare.api import parse_pool
from gpushare.api.v1alpha1 import GPUSharePool
from gpushare.policy.pooldiff import FieldChange, diff_pools, show, spec_changes


def _pool(name: str, **spec: Any) -> GPUSharePool:
    body = {"nodeSelector": {"matchLabels": {"np": name}}, **spec}
    return parse_pool(
        {
            "apiVersion": "gpushare.io/v1alpha1",
            "kind": "GPUSharePool",
            "metadata": {"name": name},
            "spec": body,
        }
    )


def test_defaults_are_not_changes() -> None:
    assert spec_changes(_pool("a"), _pool("a", placement="binpack", rollout={"modeSwitch": "Wait"})) == ()


def test_nested_and_list_fields() -> None:
    old = _pool("a", rollout={"maxUnavailable": 1})
    new = _pool("a", rollout={"maxUnavailable": "25%", "modeSwitch": "Evict"}, computeAllocation=True)
    assert spec_changes(old, new) == (
        FieldChange("spec.computeAllocation", False, True),
        FieldChange("spec.rollout.maxUnavailable", 1, "25%"),
        FieldChange("spec.rollout.modeSwitch", "Wait", "Evict"),
    )
    sel = _pool(
        "a", nodeSelector={"matchExpressions": [{"key": "np", "operator": "In", "values": ["a", "b"]}]}
    )
    changes = {f.path for f in spec_changes(_pool("a"), sel)}
    assert changes == {"spec.nodeSelector.matchExpressions", "spec.nodeSelector.matchLabels.np"}


def test_diff_pools_kinds() -> None:
    current = [_pool("a"), _pool("b"), _pool("gone")]
    out = diff_pools(current, [_pool("a"), _pool("b", placement="spread"), _pool("new")], deleting=["gone"])
    assert [(p.name, p.change) for p in out] == [
        ("a", "unchanged"),
        ("b", "update"),
        ("new", "create"),
        ("gone", "delete"),
    ]
    assert out[1].to_dict()["fields"] == [{"path": "spec.placement", "from": "binpack", "to": "spread"}]
    assert all(f.old is None for f in out[2].fields)


def test_show() -> None:
    assert (show(None), show("x"), show(3), show(["a"])) == ("<none>", "x", "3", '["a"]')
