"""The report phase of a pass: the pool's status, its metrics and Events (composed in policy/).

The status is written only when it changed, at most every ``STATUS_INTERVAL`` seconds while the
pool is moving (``policy.decide.status_wait``, on the pass's clock); a settled status goes out
at once. :class:`ReportMemory` is what a pool's reports remember between passes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpushare import metrics
from gpushare.api.v1alpha1 import GPUSharePool, GPUSharePoolStatus
from gpushare.backends import backend_for
from gpushare.policy import ClusterPlan, NodePlan
from gpushare.policy.decide import FAST_REQUEUE, status_wait
from gpushare.policy.events import Event, invalid_events, switch_events, transition_events
from gpushare.policy.status import awaiting_plugin_mode, pool_status, status_merge_patch
from gpushare.reconcile.calls import PassCalls
from gpushare.reconcile.memory import ReportMemory
from gpushare.reconcile.scope import PassScope
from gpushare.reconcile.store import ClusterState, placeholder


@dataclass(frozen=True)
class Report:
    """What the report phase leaves for the requeue."""

    #: Seconds until a changed status not written yet may go out (or a failed write is retried).
    status_wait: float | None = None
    #: A node waits for its device plugin to advertise the pool's mode.
    awaiting_plugin: bool = False


def _status_of(
    s: PassScope,
    state: ClusterState,
    model: GPUSharePool,
    plans: Sequence[NodePlan],
    invalid: Mapping[str, str],
    **kw: Any,
) -> dict[str, Any]:
    cp = ClusterPlan(nodes=tuple(plans), invalid_pools=invalid)
    names = [p.node for p in plans]
    node_map = {n: v for n in names if (v := state.view(n)) is not None}
    return pool_status(model, cp, node_map, state.pods_of(names), now=s.now, **kw)


async def _write_status(
    s: PassScope,
    writes: PassCalls,
    memory: ReportMemory,
    status: dict[str, Any],
    base: Mapping[str, Any],
    current: Mapping[str, Any],
    *,
    moving: bool,
) -> float | None:
    """Write ``status`` if it changed; returns when to try again (None: nothing left to write)."""
    if status in (base, current):
        memory.status = status
        return None
    wait = status_wait(memory.written_at, s.now, moving=moving)
    if wait is not None:
        return wait
    memory.written_at = s.now
    ok = await writes.patch_status(s.name, status_merge_patch(status, current, base))
    if ok is None:
        return FAST_REQUEUE
    if ok:
        memory.status = status
    return None


def _based(model: GPUSharePool, base: Mapping[str, Any]) -> GPUSharePool:
    """``model`` with the status last written (conditions merge into what we wrote, not a lagging copy)."""
    try:
        return model.model_copy(update={"status": GPUSharePoolStatus.model_validate(base)})
    except ValueError:
        return model


async def report(
    s: PassScope,
    plans: Sequence[NodePlan],
    errors: Mapping[str, str],
    events: Sequence[Event],
    *,
    moving: bool,
    state: ClusterState,
    invalid_pools: Mapping[str, str],
    writes: PassCalls,
    memory: ReportMemory,
    held: Mapping[str, str] | None = None,
) -> Report:
    """Post the pass's Events (``events`` and new holds/conflicts), publish metrics and the status
    (not for an invalid pool being deleted: its cleanup only posts the Events of its writes)."""
    model = s.model
    if model is None:
        await writes.post(s.ref, events)
        return Report()
    current = dict(s.raw.get("status") or {})
    base = memory.status if memory.status is not None else current
    status = _status_of(
        s, state, _based(model, base), plans, invalid_pools, errors=errors, held=held, deleting=s.deleting
    )
    counts = status.get("nodes", {})
    metrics.set_pool_nodes(
        s.name,
        {
            "Ready": counts.get("ready", 0),
            "Pending": counts.get("pending", 0),
            "Held": counts.get("held", 0),
            "Conflict": counts.get("conflicting", 0),
            "Failed": counts.get("failed", 0),
        },
    )
    metrics.set_pool_status(
        s.name, status, ready_timeout_seconds=model.spec.device_plugin.ready_timeout_seconds
    )
    transitions, memory.reported = transition_events(s.name, plans, memory.reported)
    switches, memory.reported = switch_events(
        status.get("nodeStatuses") or [], backend_for(model.spec).switch_reasons, memory.reported
    )
    await writes.post(s.ref, [*events, *transitions, *switches])
    wait = await _write_status(s, writes, memory, status, base, current, moving=moving)
    return Report(status_wait=wait, awaiting_plugin=awaiting_plugin_mode(status))


async def report_invalid(
    s: PassScope,
    why: str,
    *,
    plans: Sequence[NodePlan],
    state: ClusterState,
    invalid_pools: Mapping[str, str],
    writes: PassCalls,
    memory: ReportMemory,
) -> None:
    """An invalid pool's status through ``pool_status`` too: all four conditions current."""
    current = dict(s.raw.get("status") or {})
    base = memory.status if memory.status is not None else current
    invalid = {**invalid_pools, s.name: why}
    status = _status_of(s, state, placeholder({**s.raw, "status": base}), plans, invalid)
    status.pop("schedule", None)  # the spec does not say a valid one
    if "schedule" in current:
        status["schedule"] = current["schedule"]
    if status in (base, current):
        memory.status = status
        return
    changed = base.get("conditions") != status.get("conditions")
    events, memory.reported = invalid_events(why, memory.reported, conditions_changed=changed)
    await writes.post(s.ref, events)
    await _write_status(s, writes, memory, status, base, current, moving=False)
