"""What applying GPUSharePool manifests would change in their specs (the `kubectl diff` part of plan).

Pure: given the pools the cluster holds and the pools a file declares, say per pool whether it is
created, changed (which spec fields, old -> new, defaults filled in as the API server would) or
unchanged, and which are deleted. The node-level consequences come from ``policy.plan``.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gpushare.api.v1alpha1 import GPUSharePool

ChangeKind = Literal["create", "update", "unchanged", "delete"]


@dataclass(frozen=True)
class FieldChange:
    path: str
    old: Any
    new: Any


@dataclass(frozen=True)
class PoolChange:
    name: str
    change: ChangeKind
    fields: tuple[FieldChange, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "change": self.change,
            "fields": [{"path": f.path, "from": f.old, "to": f.new} for f in self.fields],
        }


def _flatten(value: Any, prefix: str) -> dict[str, Any]:
    """Dotted paths to leaves; lists (selector terms) are compared whole, empty maps have none."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key in sorted(value):
            out.update(_flatten(value[key], f"{prefix}.{key}"))
        return out
    return {prefix: value}


def spec_changes(old: GPUSharePool, new: GPUSharePool) -> tuple[FieldChange, ...]:
    """Changed spec leaves (``spec.rollout.modeSwitch``...), defaults applied on both sides."""
    before = _flatten(old.spec.dump(), "spec")
    after = _flatten(new.spec.dump(), "spec")
    return tuple(
        FieldChange(path, before.get(path), after.get(path))
        for path in sorted(set(before) | set(after))
        if before.get(path) != after.get(path)
    )


def diff_pools(
    current: Sequence[GPUSharePool], applied: Sequence[GPUSharePool], deleting: Collection[str] = ()
) -> list[PoolChange]:
    """One entry per applied pool (in file order), then one per deleted pool."""
    live = {p.name: p for p in current}
    out: list[PoolChange] = []
    for pool in applied:
        before = live.get(pool.name)
        if before is None:
            out.append(PoolChange(pool.name, "create", spec_changes_from_nothing(pool)))
            continue
        changes = spec_changes(before, pool)
        out.append(PoolChange(pool.name, "update" if changes else "unchanged", changes))
    out.extend(PoolChange(name, "delete") for name in sorted(deleting))
    return out


def spec_changes_from_nothing(pool: GPUSharePool) -> tuple[FieldChange, ...]:
    return tuple(FieldChange(path, None, value) for path, value in _flatten(pool.spec.dump(), "spec").items())


def show(value: Any) -> str:
    """A value as one short line (JSON for lists and maps, plain for scalars)."""
    if value is None:
        return "<none>"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)
