"""The named-config phase of an NVIDIA pool's pass: keep the pool's configs in their ConfigMaps
(``gpushare.backends.nvidia.keys``: the plugin's, and for some pools another), and hold back node
labels that name a config the pods reading it cannot see yet.

What to write is decided by ``gpushare.backends.nvidia.configmap.plan_configmap`` (pure) on the
key's view of the ConfigMap (one key per config; a reader of one file sees its entries so); this
phase reads the ConfigMap, writes the plan's patch turned back by the key (only onto the version it
read), and tells the
pass which of its node patches may go out now. On a pass of a pool being deleted,
:func:`release_configs` deletes gpushare's keys that no node names once no live pool is left on
the ConfigMap (``release_plan``): when a key goes is stated in ``gpushare.backends.nvidia.configmap``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import partial

from gpushare import constants as c
from gpushare.api.v1alpha1 import GPUSharePool
from gpushare.backends.nvidia.configmap import KEEP_UNUSED, LayoutError, Wanted, plan_configmap, release_plan
from gpushare.backends.nvidia.keys import ConfigKey, config_keys
from gpushare.k8s import ApiError, ApiUnavailable, Conflict
from gpushare.policy.planner import NodePlan
from gpushare.reconcile.calls import PassCalls
from gpushare.reconcile.scope import PassScope
from gpushare.reconcile.store import ClusterState


@dataclass(frozen=True)
class Configs:
    """What the phase found: whether the pool's configs may be named by node labels now (the first
    not ready, when one is not)."""

    ready: bool = True
    #: The config name not ready (None: not an NVIDIA pool, or all ready).
    name: str | None = None
    #: How long until it is ready (while it propagates to the pods that read it).
    wait: timedelta | None = None
    #: Why the config could not be kept (ConfigMap missing, refused write...).
    error: str | None = None
    #: How long until an unused config key of gpushare's is old enough to go (the pass looks
    #: again then).
    collect: timedelta | None = None
    #: The node label that names it.
    label: str = c.LABEL_NVIDIA_CONFIG
    #: Whose mounted copy of its ConfigMap it must reach.
    readers: str = "the device plugin pods'"

    #: The pool's other configs not ready yet (each written in the same pass, propagating alongside).
    others: tuple[Configs, ...] = ()

    def holding(self, plan: NodePlan) -> Configs | None:
        """The config not ready yet that ``plan`` sets the node's label to (None: none)."""
        for found in (self, *self.others):
            if not found.ready and found.name is not None and plan.label_patch.get(found.label) == found.name:
                return found
        return None

    def holds(self, plan: NodePlan) -> bool:
        """Whether ``plan`` sets a node's label to a config not ready yet."""
        return self.holding(plan) is not None

    def why(self) -> str:
        if self.error is not None:
            return self.error
        left = f", about {int(self.wait.total_seconds())}s left" if self.wait is not None else ""
        return (
            f"waiting for config {self.name} to reach {self.readers} mounted ConfigMap "
            f"(nvidia.configPropagationSeconds{left})"
        )


def _sharing(pools: Sequence[GPUSharePool], namespace: str, name: str) -> list[Wanted]:
    """Every config the live pools want in ConfigMap ``namespace/name``."""
    out: list[Wanted] = []
    for p in pools:
        n = p.spec.nvidia
        if n is None:
            continue
        out.extend(
            Wanted(k.name, k.document, k.propagation)
            for k in config_keys(n)
            if (k.namespace, k.configmap) == (namespace, name)
        )
    return out


def _live(s: PassScope, state: ClusterState) -> list[GPUSharePool]:
    return [m for m in state.pools.models if m.name in s.live and m.name not in state.pools.deleting]


def _named(state: ClusterState, label: str) -> set[str]:
    """The config names nodes are labelled with (``label``), our own writes not yet watched included."""
    views = (state.view(name) for name in {*state.nodes, *state.fresh})
    return {v.labels.get(label, "") for v in views if v is not None} - {""}


async def keep_configs(
    s: PassScope, state: ClusterState, writes: PassCalls, retention: timedelta = KEEP_UNUSED
) -> Configs:
    """Keep each of the pool's configs (and those of the other live pools sharing its ConfigMaps)
    in their ConfigMap; delete the keys gpushare wrote that no pool wants and no node names, once
    they are ``retention`` old. Every key is kept in the same pass, so that they propagate to their
    readers side by side (a MIG pool's two keys wait one propagation, not two). The first config
    not ready, an error first (the others with it), else all ready."""
    model = s.model
    if model is None or model.spec.nvidia is None or s.deleting:
        return Configs()
    found = [await _keep_one(s, state, writes, key, retention) for key in config_keys(model.spec.nvidia)]
    collect = min((f.collect for f in found if f.collect is not None), default=None)
    # One that needs someone to act (an error) is named before one that only propagates.
    waiting = sorted((f for f in found if not f.ready), key=lambda f: f.error is None)
    if waiting:
        return replace(waiting[0], collect=collect, others=tuple(waiting[1:]))
    return Configs(collect=collect)


async def _keep_one(
    s: PassScope, state: ClusterState, writes: PassCalls, key: ConfigKey, retention: timedelta
) -> Configs:
    mine, where = key.name, key.where
    held = partial(Configs, False, mine, label=key.label, readers=key.readers)
    try:
        obj = await writes.cluster.read_configmap(key.namespace, key.configmap)
    except ApiError as exc:
        return held(error=f"reading {where} failed: {exc}")
    if obj is None:
        return held(error=f"{where} does not exist: {key.missing}")
    try:
        view = key.view(obj)
    except LayoutError as exc:
        return held(error=str(exc))
    plan = plan_configmap(
        view,
        _sharing(_live(s, state), key.namespace, key.configmap),
        _named(state, key.label),
        s.now,
        retention,
    )
    patch = key.unview(obj, plan.patch)
    if patch is not None:
        try:
            await writes.cluster.patch_configmap(key.namespace, key.configmap, patch)
        except Conflict:
            return held(error=f"{where} changed while gpushare wrote it; writing again")
        except ApiError as exc:
            return held(error=f"writing config {mine} into {where} failed: {exc}")
        s.log.info(
            "Wrote NVIDIA configs", configmap=where, waiting=sorted(plan.waiting), removed=plan.removed
        )
    if mine in plan.foreign:
        return held(
            error=f"{where} has a key {mine} that gpushare did not write; it is left as is",
            collect=plan.expires,
        )
    if mine in plan.ready:
        return Configs(True, mine, collect=plan.expires, label=key.label, readers=key.readers)
    return held(wait=plan.waiting.get(mine), collect=plan.expires)


async def release_configs(s: PassScope, state: ClusterState, writes: PassCalls) -> str | None:
    """On a pass of a pool being deleted, after its node writes: for each ConfigMap of the pool's
    configs on which no live pool is left, delete every key gpushare wrote there that no node names
    now (nothing else). Why it could not, for the pass to run again (a conflicting write, the API
    server unavailable); None when done, or when nothing can be done (no ConfigMap, another
    refusal: logged, not retried, so that a pool can always be deleted)."""
    model = s.model
    if model is None or model.spec.nvidia is None or not s.deleting:
        return None
    for key in config_keys(model.spec.nvidia):
        if _sharing(_live(s, state), key.namespace, key.configmap):
            continue  # a live pool's passes keep (and collect) the ConfigMap's keys
        why = await _release_one(s, state, writes, key)
        if why is not None:
            return why
    return None


async def _release_one(s: PassScope, state: ClusterState, writes: PassCalls, key: ConfigKey) -> str | None:
    where = key.where
    try:
        obj = await writes.cluster.read_configmap(key.namespace, key.configmap)
        if obj is not None:
            plan = release_plan(key.view(obj), _named(state, key.label), s.now)
            patch = key.unview(obj, plan.patch)
            if patch is not None:
                await writes.cluster.patch_configmap(key.namespace, key.configmap, patch)
                s.log.info("Deleted unused NVIDIA configs", configmap=where, removed=plan.removed)
    except (Conflict, ApiUnavailable) as exc:
        return f"deleting gpushare's unused configs from {where} failed, trying again: {exc}"
    except (ApiError, LayoutError) as exc:
        s.log.warning("Unused NVIDIA configs left in place", configmap=where, error=str(exc))
    return None
