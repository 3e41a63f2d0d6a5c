"""The named-config phase of an NVIDIA pool's pass: keep the pool's config in the plugin's
ConfigMap, and hold back node labels that name a config the plugin pods cannot see yet.

What to write is decided by ``gpushare.backends.nvidia.configmap.plan_configmap`` (pure); this
phase reads the ConfigMap, writes the plan's patch (only onto the version it read), and tells the
pass which of its node patches may go out now.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from gpushare import constants as c
from gpushare.api.v1alpha1 import GPUSharePool
from gpushare.backends.nvidia import config
from gpushare.backends.nvidia.configmap import Wanted, plan_configmap
from gpushare.k8s import ApiError, Conflict
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


async def keep_configs(s: PassScope, state: ClusterState, writes: PassCalls) -> Configs:
    """Keep the pool's config (and those of the other live pools sharing its ConfigMap) in the
    ConfigMap; delete the keys gpushare wrote that no pool wants and no node names."""
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
    live = [m for m in state.pools.models if m.name in s.live and m.name not in state.pools.deleting]
    in_use = {v.labels.get(c.LABEL_NVIDIA_CONFIG, "") for v in state.nodes.values()} - {""}
    plan = plan_configmap(obj, _sharing(live, cm.namespace, cm.name), in_use, s.now)
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
            False, mine, error=f"{where} has a key {mine} that gpushare did not write; it is left as is"
        )
    if mine in plan.ready:
        return Configs(True, mine)
    return Configs(False, mine, wait=plan.waiting.get(mine))
