"""The node phases of a pass: confirm the batch, patch the nodes, evict what blocks a mode switch."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpushare import metrics
from gpushare.backends import SharingBackend
from gpushare.k8s import ApiError
from gpushare.policy import NodePlan, NodeView
from gpushare.policy.events import names
from gpushare.policy.rollout import confirmed, equivalent, needs_confirmation
from gpushare.reconcile.batch import for_each
from gpushare.reconcile.calls import PassCalls, describe
from gpushare.reconcile.plans import PlanCache
from gpushare.reconcile.scope import PassScope
from gpushare.reconcile.store import ClusterState

#: At most this many nodes about to switch mode are confirmed with a targeted pod list each
#: (``spec.nodeName``) before the write; above it the GPU-pod index is trusted (never a list of
#: every pod of the cluster).
PER_NODE_LISTS = 8
#: A node patch refused with 409 (the node changed) is read, planned and sent again this often.
PATCH_ATTEMPTS = 3


@dataclass
class Written:
    """The node patches of a pass: those made (in rollout order), failures, refusals."""

    done: list[NodePlan] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    conflicts: int = 0


def remember(s: PassScope, state: ClusterState, cache: PlanCache, obj: Mapping[str, Any] | None) -> None:
    """Believe our own write (the returned node) until the watch shows it; plan it again (the
    pools it concerns are woken after the phase)."""
    s.effects.wake.update(cache.remember(state, obj, s.now))


async def confirm(
    s: PassScope, patches: Sequence[NodePlan], state: ClusterState, cache: PlanCache, writes: PassCalls
) -> list[NodePlan]:
    """Plan the batch again with this pass's clock; confirm a few mode switches with the API.

    The GPU-pod index may lag a pod that was just bound. For up to ``PER_NODE_LISTS`` nodes about
    to switch mode this pass, their pods are listed (``spec.nodeName``) and the nodes planned with
    those; for more, the index is trusted (no cluster-wide pod list). A patch no longer
    :func:`~gpushare.policy.rollout.confirmed` waits for the next pass.
    """
    if not patches:
        return []
    views = [v for v in (state.view(p.node) for p in patches) if v is not None]
    # Nodes this pass's replan planned with this clock (nothing awaited since) keep that plan:
    # after a pool change that is every node, planned once before the first write, not twice.
    clock, planned = cache.planned_with
    current = planned if clock == s.now else frozenset()
    again = {v.name: cache.plans[v.name] for v in views if v.name in current and v.name in cache.plans}
    stale = [v for v in views if v.name not in again]
    if stale:
        again.update(state.plan_nodes(stale, s.now).by_node())
    check = {p.node for p in again.values() if needs_confirmation(p)}
    if 0 < len(check) <= PER_NODE_LISTS:
        try:
            lists = await asyncio.gather(*(writes.pods_on_node(n) for n in sorted(check)))
        except ApiError as exc:
            s.log.warning("Listing pods failed; mode switches wait for the next pass", error=str(exc))
            for node in check:
                again.pop(node, None)
        else:
            listed = [pod for found in lists for pod in found]
            checked = [v for v in views if v.name in check]
            again.update(state.plan_nodes(checked, s.now, listed).by_node())
    out = []
    for p in patches:
        q = again.get(p.node)
        if q is not None and confirmed(p, q):
            out.append(q)
        else:
            s.effects.dirty.add(p.node)
    return out


async def _patch(
    s: PassScope, p: NodePlan, written: Written, state: ClusterState, cache: PlanCache, writes: PassCalls
) -> NodePlan | None:
    """Patch one node, replanning it after a 409 (go on only with an equivalent change)."""
    seen = state.view(p.node)
    for _ in range(PATCH_ATTEMPTS):
        out = await writes.patch_node(s.name, p.node, p.node_patch(), seen)
        if out.error is not None:
            written.errors[p.node] = f"patching the node failed: {describe(out.error)}"
            s.log.error("Patching Node failed", node=p.node, error=describe(out.error))
            s.effects.dirty.add(p.node)
            return None
        if not out.conflict:
            break
        # 409: the node changed since it was planned. Read it and plan it again.
        current = await writes.read_node(p.node)
        s.effects.dirty.add(p.node)
        if current is None:
            return None
        remember(s, state, cache, current)
        seen = NodeView.project(current)
        again = state.plan_nodes([seen], s.now).nodes[0]
        if not equivalent(p, again):
            written.conflicts += 1
            return None
        p = again
    else:
        written.conflicts += 1
        s.log.info("Node kept changing while being patched; planning again", node=p.node)
        return None
    if out.gone:  # 404: the node is gone (a watch that missed the deletion)
        s.effects.gone.add(p.node)
        return None
    remember(s, state, cache, out.obj)
    if p.label_patch:
        metrics.LABEL_PATCHES.labels(pool=s.name, action=p.action.value).inc()
    if s.log.is_enabled_for(logging.DEBUG):  # a line per node: not even built unless asked for
        s.log.debug(
            "Patched Node",
            node=p.node,
            action=p.action.value,
            reason=p.reason,
            labels=dict(p.label_patch),
            restart_plugin=p.restart_plugin,
            cordon=p.cordon,
            uncordon=p.uncordon,
        )
    return p


async def write_nodes(
    s: PassScope, batch: Sequence[NodePlan], state: ClusterState, cache: PlanCache, writes: PassCalls
) -> Written:
    """Patch the nodes of ``batch`` (a node another pass is writing is left for later)."""
    written = Written()
    if not batch:
        return written

    async def claimed(p: NodePlan) -> NodePlan | None:
        with writes.claim(p.node) as mine:
            return await _patch(s, p, written, state, cache, writes) if mine else None

    written.done = [p for p in await for_each(batch, claimed) if p is not None]
    done = written.done
    if done:
        actions: dict[str, int] = {}
        for p in done:
            actions[p.action.value] = actions.get(p.action.value, 0) + 1
        s.log.info(
            "Patched Nodes",
            count=len(done),
            actions=actions,
            restarts=sum(1 for p in done if p.restart_plugin),
            cordoned=sum(1 for p in done if p.cordon),
            uncordoned=sum(1 for p in done if p.uncordon),
            failed=len(written.errors),
            conflicts=written.conflicts,
            nodes=names([p.node for p in done]),
        )
    return written


async def evict(
    s: PassScope, holds: Sequence[NodePlan], state: ClusterState, writes: PassCalls
) -> dict[str, str]:
    """Evict the pods blocking held mode switches, once their node is cordoned; the failures."""
    errors: dict[str, str] = {}
    for p in holds:
        node = state.view(p.node)
        if node is None or not node.unschedulable:
            continue  # cordon first (this pass or the next one)
        for pod in p.blocking_pods:
            if (error := await writes.evict(s.name, p.node, pod)) is not None:
                errors[p.node] = error
    return errors


async def record_switches(
    s: PassScope, backend: SharingBackend, state: ClusterState, cache: PlanCache, writes: PassCalls
) -> None:
    """Write what the pool's nodes show of a switch under way (``SharingBackend.switch_seen``, as
    the node is now or as the watch saw it in between): the backend's record on the node, which
    its status reads (a report is trusted only once the switch was seen under way)."""
    for p in cache.of_pool(s.name, orphans=False):
        view = state.view(p.node) if p.pool == s.name else None
        if view is None:
            continue
        patch = backend.switch_seen(view.labels, view.annotations, view.label_times) or state.switch_seen(
            view
        )
        if not patch:
            continue
        with writes.claim(p.node) as mine:
            if not mine:
                continue
            out = await writes.patch_node(s.name, p.node, {"metadata": {"annotations": dict(patch)}})
        if out.error is not None or out.conflict:
            s.effects.dirty.add(p.node)
            continue
        state.switches_seen.pop(p.node, None)
        if out.gone:
            s.effects.gone.add(p.node)
        else:
            remember(s, state, cache, out.obj)
