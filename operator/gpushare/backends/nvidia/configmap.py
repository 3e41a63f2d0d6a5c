"""The plugin's named-config ConfigMap, as gpushare keeps its own keys in it (pure).

The ConfigMap belongs to NVIDIA's plugin (its chart's ``config.name``); gpushare only adds the
configs its pools need, one key per config name, and records which keys are its own, and since
when, in one annotation (``gpushare.io/configs``: ``{name: RFC 3339}``). It never changes or deletes
a key it did not write.

A key added to the ConfigMap reaches the plugin pods' mounted directory only at the kubelet's next
sync of each pod (observed 59 to 90 s on the real node; ``syncFrequency`` 1 min plus jitter), and
config-manager fails on a label naming a config it cannot find: a config is *ready* to be named by
a node label only ``configPropagationSeconds`` after gpushare wrote it. A key no pool wants and no
node names any more is kept for :data:`KEEP_UNUSED` after it was written, so that a pool switched
back (replicas 4 -> 2 -> 4) finds its config ready at once; then it is deleted.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpushare import constants as c

#: How long a key gpushare wrote stays once unused (from when it was written).
KEEP_UNUSED = timedelta(hours=1)


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def written(obj: Mapping[str, Any] | None) -> dict[str, datetime | None]:
    """The keys gpushare wrote into this ConfigMap and when (None: time unreadable)."""
    raw = ((obj or {}).get("metadata") or {}).get("annotations", {}) or {}
    try:
        data = json.loads(raw.get(c.ANNOTATION_CONFIGS) or "{}")
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): _parse(v) for k, v in data.items()}


@dataclass(frozen=True)
class Wanted:
    """One config a live pool needs in the ConfigMap."""

    name: str
    document: str
    propagation: timedelta


@dataclass(frozen=True)
class ConfigMapPlan:
    """What to write to the ConfigMap, and which configs nodes may be labelled with now."""

    #: A JSON merge patch (with ``metadata.resourceVersion``: applied only to the ConfigMap as it
    #: was read), or None when nothing changes.
    patch: Mapping[str, Any] | None
    #: The wanted configs that a node label may name now.
    ready: frozenset[str]
    #: Wanted configs not ready yet: name -> how long until they are.
    waiting: Mapping[str, timedelta] = field(default_factory=dict)
    #: Keys gpushare wrote that are deleted (no live pool wants them, no node is labelled so).
    removed: tuple[str, ...] = ()
    #: Wanted configs whose key holds another document that gpushare did not write.
    foreign: tuple[str, ...] = ()


def plan_configmap(
    obj: Mapping[str, Any], wanted: Collection[Wanted], in_use: Collection[str], now: datetime
) -> ConfigMapPlan:
    """The plan for the ConfigMap ``obj`` (as read) given every config live pools want of it and
    the config names nodes are labelled with now."""
    data: Mapping[str, str] = obj.get("data") or {}
    ours = written(obj)
    new_data: dict[str, str | None] = {}
    new_ours = dict(ours)
    ready: set[str] = set()
    waiting: dict[str, timedelta] = {}
    foreign: list[str] = []
    for w in wanted:
        have = data.get(w.name)
        if have is None:
            new_data[w.name] = w.document
            new_ours[w.name] = now
            waiting[w.name] = w.propagation
            continue
        if have != w.document:
            if w.name in ours:
                # Ours, edited by someone: put it back (its name says its content).
                new_data[w.name] = w.document
                new_ours[w.name] = now
                waiting[w.name] = w.propagation
            else:
                foreign.append(w.name)
            continue
        since = ours.get(w.name)
        left = (since + w.propagation - now) if since is not None else timedelta(0)
        if left > timedelta(0):
            waiting[w.name] = left
        else:
            ready.add(w.name)
    wanted_names = {w.name for w in wanted}
    removed = tuple(
        sorted(
            k
            for k, since in ours.items()
            if k not in wanted_names and k not in in_use and (since is None or now - since >= KEEP_UNUSED)
        )
    )
    for key in removed:
        new_ours.pop(key)
        if key in data:
            new_data[key] = None
    patch: dict[str, Any] | None = None
    if new_data or removed:
        annotation = json.dumps(
            {k: _iso(v) if v is not None else "" for k, v in sorted(new_ours.items())}, separators=(",", ":")
        )
        meta: dict[str, Any] = {"annotations": {c.ANNOTATION_CONFIGS: annotation}}
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            meta["resourceVersion"] = version
        patch = {"metadata": meta, "data": new_data}
    return ConfigMapPlan(patch, frozenset(ready), waiting, removed, tuple(sorted(foreign)))
