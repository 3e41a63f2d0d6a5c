"""The plugin's named-config ConfigMap, as gpushare keeps its own keys in it (pure).

The ConfigMap belongs to NVIDIA's plugin (its chart's ``config.name``); gpushare only adds the
configs its pools need, one key per config name, and records which keys are its own, and since
when, in one annotation (``gpushare.io/configs``: ``{name: RFC 3339}``). It never changes or deletes
a key it did not write.

A key added to the ConfigMap reaches the plugin pods' mounted directory only at the kubelet's next
sync of each pod (observed 59 to 90 s on the real node; ``syncFrequency`` 1 min plus jitter), and
config-manager fails on a label naming a config it cannot find: a config is *ready* to be named by
a node label only ``configPropagationSeconds`` after gpushare wrote it.

**When a key of gpushare's goes.** A key gpushare wrote is deleted once no live pool wants it and
no node's ``nvidia.com/device-plugin.config`` names it, and never while a node names it:

* while a pool on the ConfigMap lives, by that pool's pass once the key is ``retention`` old
  (:data:`KEEP_UNUSED`, one hour from when it was written; ``gpushare run
  --nvidia-config-retention``), so that a pool switched back (replicas 4 -> 2 -> 4) finds its
  config ready at once. The pass that sees the key unused looks again when it is that old
  (:attr:`ConfigMapPlan.expires`), and a node that stops naming it wakes the pool: the key is
  gone within seconds of the later of that age and the last node naming it (at most a minute,
  ``policy.decide.RESYNC``, should a wake-up be missed);
* when the last pool on the ConfigMap is deleted, by its cleanup, before its finalizer goes: every
  key of gpushare's that no node names once the pool's nodes are restored, whatever its age
  (:func:`release_plan`). A key a node still names then (``cleanup: Retain``) stays with that node.

A key gpushare did not write (not in the annotation) is never changed or deleted.

A reader that takes all its configs from one file (NVIDIA's MIG manager) is served the same way
through a view of that file as one key per config (:mod:`gpushare.backends.nvidia.migfile`): the
plan is made on the view and its patch turned back into one of the file.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpushare import constants as c

#: How long a key gpushare wrote stays once unused (from when it was written), by default.
KEEP_UNUSED = timedelta(hours=1)


class LayoutError(ValueError):
    """The ConfigMap does not hold its configs the way its reader needs (the message says what to
    do)."""


def as_keys(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ConfigMap as its configs: one key per config (the plugin's layout), as it is."""
    return obj


def keys_patch(obj: Mapping[str, Any], patch: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """A patch of :func:`as_keys`'s view as a patch of the ConfigMap: the same."""
    return patch


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
    #: How long until the next key gpushare wrote that no pool wants and no node names is
    #: ``retention`` old and can go (None: no such key waits).
    expires: timedelta | None = None


def plan_configmap(
    obj: Mapping[str, Any],
    wanted: Collection[Wanted],
    in_use: Collection[str],
    now: datetime,
    retention: timedelta = KEEP_UNUSED,
) -> ConfigMapPlan:
    """The plan for the ConfigMap ``obj`` (as read) given every config live pools want of it and
    the config names nodes are labelled with now: a key of gpushare's that is neither goes once
    it is ``retention`` old."""
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
    unused = {k: since for k, since in ours.items() if k not in wanted_names and k not in in_use}
    removed = tuple(sorted(k for k, since in unused.items() if since is None or now - since >= retention))
    ageing = [
        since + retention - now for k, since in unused.items() if since is not None and k not in removed
    ]
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
    expires = min(ageing, default=None)
    return ConfigMapPlan(patch, frozenset(ready), waiting, removed, tuple(sorted(foreign)), expires)


def release_plan(obj: Mapping[str, Any], in_use: Collection[str], now: datetime) -> ConfigMapPlan:
    """The plan for the ConfigMap ``obj`` once no live pool is left on it (the last one's cleanup):
    every key of gpushare's that no node names (``in_use``) goes now, whatever its age; nothing
    else changes."""
    return plan_configmap(obj, (), in_use, now, retention=timedelta(0))
