"""The named-config phase of an NVIDIA pool's pass: keep the pool's config in the plugin's
ConfigMap, and hold back node labels that name a config the plugin pods cannot see yet.

What to write is decided by ``gpushare.backends.nvidia.configmap.plan_configmap`` (pure); this
phase reads the ConfigMap, writes the plan's patch (only onto the version it read), and tells the
pass which of its node patches may go out now. On a pass of a pool being deleted,
:func:`release_configs` deletes gpushare's keys that no node names once no live pool is left on
the ConfigMap (``release_plan``): when a key goes is stated in ``gpushare.backends.nvidia.configmap``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from gpushare import constants as c
from gpushare.api.v1alpha1 import GPUSharePool
from gpushare.backends.nvidia import config
from gpushare.backends.nvidia.configmap import KEEP_UNUSED, Wanted, plan_configmap, release_plan
from gpushare.k8s import ApiError, ApiUnavailable, Conflict
from gpushare.policy.planner import NodePlan
from gpushare.reconcile.calls import PassCalls
from gpushare.reconcile.scope import PassScope
from gpushare.reconcile.store import ClusterState


@dataclass(frozen=True)
class Configs:
    """What the phase found: whether the pool's config may be named by node labels now."""

    ready: bool = True
    #: The pool's config name (None: not an NVIDIA pool).
    name: str | None = None
    #: How long until it is ready (while it propagates to the plugin pods).
    wait: timedelta | None = None
    #: Why the config could not be kept (ConfigMap missing, refused write...).
    error: str | None = None
    #: How long until an unused config key of gpushare's is old enough to go (the pass looks
    #: again then).
    collect: timedelta | None = None

    def holds(self, plan: NodePlan) -> bool:
        """Whether ``plan`` sets the node's config label to the pool's config, not ready yet."""
        return (
            not self.ready
            and self.name is not None
            and plan.label_patch.get(c.LABEL_NVIDIA_CONFIG) == self.name
        )

    def why(self) -> str:
        if self.error is not None:
            return self.error
        left = f", about {int(self.wait.total_seconds())}s left" if self.wait is not None else ""
        return (
            f"waiting for config {self.name} to reach the device plugin pods' mounted ConfigMap "
            f"(nvidia.configPropagationSeconds{left})"
        )


def _sharing(pools: Sequence[GPUSharePool], namespace: str, name: str) -> list[Wanted]:
    out = []
    for p in pools:
        n = p.spec.nvidia
        if n is None or (n.config_map.namespace, n.config_map.name) != (namespace, name):
            continue
        out.append(
            Wanted(config.name_of(n), config.document(n), timedelta(seconds=n.config_propagation_seconds))
        )
    return out


def _live(s: PassScope, state: ClusterState) -> list[GPUSharePool]:
    return [m for m in state.pools.models if m.name in s.live and m.name not in state.pools.deleting]


def _named(state: ClusterState) -> set[str]:
    """The config names nodes are labelled with, our own writes not yet watched included."""
    views = (state.view(name) for name in {*state.nodes, *state.fresh})
    return {v.labels.get(c.LABEL_NVIDIA_CONFIG, "") for v in views if v is not None} - {""}


async def keep_configs(
    s: PassScope, state: ClusterState, writes: PassCalls, retention: timedelta = KEEP_UNUSED
) -> Configs:
    """Keep the pool's config (and those of the other live pools sharing its ConfigMap) in the
    ConfigMap; delete the keys gpushare wrote that no pool wants and no node names, once they are
    ``retention`` old."""
    model = s.model
    if model is None or model.spec.nvidia is None or s.deleting:
        return Configs()
    cm = model.spec.nvidia.config_map
    mine = config.name_of(model.spec.nvidia)
    where = f"ConfigMap {cm.namespace}/{cm.name}"
    try:
        obj = await writes.cluster.read_configmap(cm.namespace, cm.name)
    except ApiError as exc:
        return Configs(False, mine, error=f"reading {where} failed: {exc}")
    if obj is None:
        return Configs(
            False,
            mine,
            error=f"{where} does not exist: create it (NVIDIA's chart: config.name) or point "
            "spec.nvidia.configMap at the one the device plugin mounts",
        )
    plan = plan_configmap(
        obj, _sharing(_live(s, state), cm.namespace, cm.name), _named(state), s.now, retention
    )
    if plan.patch is not None:
        try:
            await writes.cluster.patch_configmap(cm.namespace, cm.name, plan.patch)
        except Conflict:
            return Configs(False, mine, error=f"{where} changed while gpushare wrote it; writing again")
        except ApiError as exc:
            return Configs(False, mine, error=f"writing config {mine} into {where} failed: {exc}")
        s.log.info(
            "Wrote NVIDIA configs", configmap=where, waiting=sorted(plan.waiting), removed=plan.removed
        )
    if mine in plan.foreign:
        return Configs(
            False,
            mine,
            error=f"{where} has a key {mine} that gpushare did not write; it is left as is",
            collect=plan.expires,
        )
    if mine in plan.ready:
        return Configs(True, mine, collect=plan.expires)
    return Configs(False, mine, wait=plan.waiting.get(mine), collect=plan.expires)


async def release_configs(s: PassScope, state: ClusterState, writes: PassCalls) -> str | None:
    """On a pass of a pool being deleted, after its node writes: when no live pool is left on its
    ConfigMap, delete every key gpushare wrote there that no node names now (nothing else). Why it
    could not, for the pass to run again (a conflicting write, the API server unavailable); None
    when done, or when nothing can be done (no ConfigMap, another refusal: logged, not retried, so
    that a pool can always be deleted)."""
    model = s.model
    if model is None or model.spec.nvidia is None or not s.deleting:
        return None
    cm = model.spec.nvidia.config_map
    if _sharing(_live(s, state), cm.namespace, cm.name):
        return None  # a live pool's passes keep (and collect) the ConfigMap's keys
    where = f"ConfigMap {cm.namespace}/{cm.name}"
    try:
        obj = await writes.cluster.read_configmap(cm.namespace, cm.name)
        plan = release_plan(obj, _named(state), s.now) if obj is not None else None
        if plan is not None and plan.patch is not None:
            await writes.cluster.patch_configmap(cm.namespace, cm.name, plan.patch)
            s.log.info("Deleted unused NVIDIA configs", configmap=where, removed=plan.removed)
    except (Conflict, ApiUnavailable) as exc:
        return f"deleting gpushare's unused configs from {where} failed, trying again: {exc}"
    except ApiError as exc:
        s.log.warning("Unused NVIDIA configs left in place", configmap=where, error=str(exc))
    return None
