"""Demand: what each pool is short of (waiting GPU pods) and what it has to spare (idle nodes).

Pure: from pools, Nodes and Pods (as views or Kubernetes JSON) to one :class:`PoolDemand` per
pool, which the operator writes to the pool's ``status.demand`` and exports as gauges, and which
``gpushare inspect`` and ``gpushare advise`` print.

* A **waiting pod** asks for what some backend's pools give (``SharingBackend.asks_for``: ACK's
  GPU memory or compute share, NVIDIA's ``nvidia.com/gpu`` or ``nvidia.com/gpu.shared``), is bound
  to no node, is not being deleted, and the scheduler says ``PodScheduled=False`` with reason
  ``Unschedulable`` for want of GPU resources: its message names no ``Insufficient`` resource at
  all (no node matched, e.g. the pool has no node of its mode) or at least one of a backend's
  resources (``SharingBackend.node_resources``). A pod short only of ``cpu``/``memory``/``pods``
  is not GPU demand.
* A waiting pod **targets** a pool when its node constraints (nodeSelector and required node
  affinity) can be met by a node of that pool (:func:`gpushare.admission.targeting.resolve`, as
  the webhook and ``inspect`` judge it); a pod that could land in two pools counts in both. A pod
  counts for the pools it targets whose backend ``asks_for`` it (a pod asking for NVIDIA's GPUs:
  whole GPUs on an ACK pool's nodes are not sharing demand), and for every pool it targets when
  what it asks for exists only as one backend's sharing (``SharingBackend.sharing_only``: ACK's
  resources; ``advise`` says why it cannot go to another backend's pool).
* A pool's **requests** sum its waiting pods' requests of its backend's ``demand_resources``:
  ACK's GPU memory and compute share, the pool's slots (``nvidia.com/gpu``, or ``.shared`` with
  renameByDefault) for NVIDIA.
* An **idle node** of a pool belongs to it (the planner's membership: loans included), is Ready,
  not cordoned, not held or conflicting, advertises the pool's mode, and runs no unfinished pod
  that uses GPU sharing.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpushare import constants as c
from gpushare.admission.model import Context, NodeInfo, node_of
from gpushare.admission.targeting import Constraints, names_nodes, node_constraints, resolve
from gpushare.api.v1alpha1 import GPUSharePool
from gpushare.backends import BACKENDS, backend_for
from gpushare.policy.planner import Action, ClusterPlan
from gpushare.policy.views import NodeView, PodView, pod_requests

#: Names listed in ``status.demand`` (pods, idle nodes) at most.
MAX_LISTED = 20

_INSUFFICIENT = re.compile(r"Insufficient ([A-Za-z0-9./_-]+)")


#: The resources whose shortage is GPU demand (every backend's, prefixes).
_GPU_NAMES: tuple[str, ...] = tuple(dict.fromkeys(r for b in BACKENDS.values() for r in b.node_resources))


def gpu_shortage(message: str) -> bool:
    """Whether an ``Unschedulable`` message is about GPU resources (see the module docstring)."""
    short = _INSUFFICIENT.findall(message)
    return not short or any(name.startswith(_GPU_NAMES) for name in short)


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class WaitingPod:
    """A GPU-sharing pod the scheduler could not place for want of GPU resources."""

    namespace: str
    name: str
    uid: str
    #: Its effective GPU requests (every backend's resources; the non-zero ones).
    requests: Mapping[str, int]
    #: Over how many GPUs of one node its request is spread (``SharingBackend.spread``; 1 mostly).
    gpus: int
    constraints: Constraints
    #: Since when it waits (the PodScheduled condition's lastTransitionTime, else its creation).
    since: datetime | None
    message: str = ""

    def request(self, resource: str) -> int:
        """Its (effective) request of ``resource``."""
        return self.requests.get(resource, 0)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def key(self) -> str:
        return self.uid or self.ref


def spread_of(labels: Mapping[str, Any], requests: Mapping[str, int]) -> int:
    """Over how many GPUs of one node a pod's request is spread: the most any backend reads from
    its labels and requests (ACK's multi-GPU sharing label), else 1."""
    return max(1, *(b.spread(labels, requests) for b in BACKENDS.values()))


def waiting_pod(obj: Mapping[str, Any]) -> WaitingPod | None:
    """The pod as demand, or None when it is not a waiting GPU-sharing pod."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping) or not isinstance(status, Mapping):
        return None
    if spec.get("nodeName") or meta.get("deletionTimestamp") or status.get("phase", "Pending") != "Pending":
        return None
    requests = {k: v for k, v in pod_requests(spec).items() if v}
    if not any(b.asks_for(requests) for b in BACKENDS.values()):
        return None
    scheduled = next(
        (
            cond
            for cond in status.get("conditions") or []
            if isinstance(cond, Mapping) and cond.get("type") == "PodScheduled"
        ),
        None,
    )
    if scheduled is None or scheduled.get("status") != "False" or scheduled.get("reason") != "Unschedulable":
        return None
    message = str(scheduled.get("message") or "")
    if not gpu_shortage(message):
        return None
    labels = meta.get("labels") or {}
    return WaitingPod(  # namespaces and the scheduler's messages repeat across a job's pods
        namespace=sys.intern(str(meta.get("namespace") or "")),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        requests=requests,
        gpus=spread_of(labels if isinstance(labels, Mapping) else {}, requests),
        constraints=node_constraints("spec", spec),
        since=_time(scheduled.get("lastTransitionTime")) or _time(meta.get("creationTimestamp")),
        message=sys.intern(message),
    )


def node_info(view: NodeView) -> NodeInfo:
    """The rules' model of a node (as the webhook builds it: ``admission.model.node_of``)."""
    return node_of(view.name, view.labels, view.allocatable, view.annotations)


def targets(
    pods: Iterable[WaitingPod], pools: Sequence[GPUSharePool], nodes: Sequence[NodeView]
) -> dict[str, list[WaitingPod]]:
    """Pool name → the waiting pods that target it (oldest first)."""
    out: dict[str, list[WaitingPod]] = {p.name: [] for p in pools}
    pods = list(pods)
    if not pods:  # no context to build (one NodeInfo per node) for no pod
        return out
    ctx = Context.build(pools, [node_info(n) for n in nodes])
    by_name = {p.name: p for p in pools}
    for pod in pods:
        anywhere = any(b.sharing_only(pod.requests) for b in BACKENDS.values())
        for name in resolve(pod.constraints, ctx).pools:
            if name in out and (anywhere or backend_for(by_name[name].spec).asks_for(pod.requests)):
                out[name].append(pod)
    for waiting in out.values():
        waiting.sort(key=_age_key)
    return out


def _age_key(pod: WaitingPod) -> tuple[datetime, str]:
    return (pod.since or datetime.max.replace(tzinfo=UTC), pod.ref)


def busy_nodes(pods: Iterable[PodView]) -> set[str]:
    """Nodes running an unfinished pod that uses a GPU (any backend's: ACK's sharing, NVIDIA's
    ``nvidia.com/gpu``): never idle, never lent."""
    return {p.node_name for p in pods if p.node_name and not p.terminated and p.requests}


def members(cp: ClusterPlan) -> dict[str, list[str]]:
    """Pool → the nodes that belong to it (applied, up to date or held)."""
    out: dict[str, list[str]] = {}
    for p in cp.nodes:
        if p.pool and p.action in (Action.APPLY, Action.NOOP, Action.HOLD):
            out.setdefault(p.pool, []).append(p.node)
    return out


def idle_nodes(
    pool: GPUSharePool, cp: ClusterPlan, nodes: Mapping[str, NodeView], busy: set[str]
) -> list[str]:
    """The pool's idle nodes (see the module docstring), by name."""
    out = []
    for p in cp.nodes:
        if p.pool != pool.name or p.action is not Action.NOOP or p.plugin_restart_pending:
            continue
        view = nodes.get(p.node)
        if view is None or not view.ready or view.unschedulable or p.node in busy:
            continue
        backend = backend_for(pool.spec)
        if not backend.advertises(
            backend.pool_mode(pool.spec), view.allocatable, view.labels, view.annotations, view.label_times
        ):
            continue
        out.append(p.node)
    return sorted(out)


@dataclass(frozen=True)
class PoolDemand:
    """One pool's demand, as ``status.demand`` says it."""

    pool: str
    waiting: tuple[WaitingPod, ...] = ()
    idle: tuple[str, ...] = ()
    #: Loans: node → the other pool (lent to it, or borrowed from it).
    lent: Mapping[str, str] = field(default_factory=dict)
    borrowed: Mapping[str, str] = field(default_factory=dict)
    #: What ``requests`` sums (the pool's backend's ``demand_resources``).
    resources: tuple[str, ...] = ()

    def requested(self, resource: str) -> int:
        """The waiting pods' requests of ``resource``, summed (an NVIDIA pool's: slots)."""
        return sum(p.request(resource) for p in self.waiting)

    @property
    def oldest(self) -> datetime | None:
        times = [p.since for p in self.waiting if p.since is not None]
        return min(times) if times else None

    def status(self) -> dict[str, Any]:
        """``status.demand`` as JSON (camelCase; no waiting times that grow: no writes while quiet)."""
        out: dict[str, Any] = {
            "pendingPods": len(self.waiting),
            "requests": {r: str(self.requested(r)) for r in self.resources},
            "pods": [p.ref for p in self.waiting[:MAX_LISTED]],
            "idleNodes": len(self.idle),
            "idleNodeNames": list(self.idle[:MAX_LISTED]),
        }
        oldest = self.oldest
        if oldest is not None:
            out["oldestPendingSince"] = iso(oldest)
        loans = [{"node": n, "to": to} for n, to in sorted(self.lent.items())] + [
            {"node": n, "from": src} for n, src in sorted(self.borrowed.items())
        ]
        if loans:
            out["loans"] = loans[:MAX_LISTED]
        return out


def compute(
    pools: Sequence[GPUSharePool],
    cp: ClusterPlan,
    nodes: Mapping[str, NodeView],
    bound: Iterable[PodView],
    waiting: Iterable[WaitingPod],
    loans: Mapping[str, tuple[str, str]] | None = None,
) -> dict[str, PoolDemand]:
    """Every pool's demand. ``loans``: node → (lender, borrower) of the loans in force."""
    busy = busy_nodes(bound)
    waiting = list(waiting)
    # resolve() judges a pool on its known nodes when it has any, on its selector otherwise: it
    # needs the nodes outside every pool or not yet switched to their pool's labels, with every
    # node of a pool that has one of those (all of them for a pod that names nodes). A pool whose
    # nodes are all settled carries its own labels: its selector stands for them.
    if any(names_nodes(term) for pod in waiting for term in pod.constraints.terms):
        known = list(nodes.values())
    else:
        settled = {p.node: p.pool for p in cp.nodes if p.pool and p.action is Action.NOOP}
        moving = {p.pool for p in cp.nodes if p.pool and p.node not in settled}
        known = [n for n in nodes.values() if n.name not in settled or settled[n.name] in moving]
    by_pool = targets(waiting, pools, known)
    lent: dict[str, dict[str, str]] = {}
    borrowed: dict[str, dict[str, str]] = {}
    for node, (lender, borrower) in (loans or {}).items():
        lent.setdefault(lender, {})[node] = borrower
        borrowed.setdefault(borrower, {})[node] = lender
    return {
        pool.name: PoolDemand(
            pool=pool.name,
            waiting=tuple(by_pool.get(pool.name, ())),
            idle=tuple(idle_nodes(pool, cp, nodes, busy)),
            lent=lent.get(pool.name, {}),
            borrowed=borrowed.get(pool.name, {}),
            resources=backend_for(pool.spec).demand_resources(pool.spec),
        )
        for pool in pools
    }


@dataclass(frozen=True)
class Snapshot:
    """Pools, nodes and demand from Kubernetes JSON (``inspect``, ``advise``)."""

    pools: tuple[GPUSharePool, ...]
    nodes: Mapping[str, NodeView]
    plan: ClusterPlan
    demand: Mapping[str, PoolDemand]
    waiting: tuple[WaitingPod, ...]
    warnings: tuple[str, ...] = ()


def snapshot(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    pools: Iterable[Mapping[str, Any]],
    *,
    now: datetime,
) -> Snapshot:
    """Every pool's demand as the operator computes it, from objects (invalid pools are skipped
    with a warning; pools being deleted are left out)."""
    from gpushare.api.loan import LoanRecord
    from gpushare.api.v1alpha1 import PoolValidationError, parse_pool
    from gpushare.policy.planner import plan

    parsed: list[GPUSharePool] = []
    warnings: list[str] = []
    deleting: set[str] = set()
    for obj in pools:
        try:
            model = parse_pool(dict(obj))
        except PoolValidationError as exc:
            warnings.append(f"skipped invalid pool: {exc}")
            continue
        parsed.append(model)
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            deleting.add(model.name)
    views = {v.name: v for v in (NodeView.from_obj(n) for n in nodes)}
    bound: list[PodView] = []
    waiting: list[WaitingPod] = []
    for obj in pods:
        w = waiting_pod(obj)
        if w is not None:
            waiting.append(w)
        elif (obj.get("spec") or {}).get("nodeName"):
            bound.append(PodView.from_obj(obj))
    cp = plan(parsed, views.values(), bound, now=now, deleting=deleting)
    by_node = cp.by_node()
    loans = {}
    for name, view in views.items():
        record = LoanRecord.parse(view.annotations.get(c.ANNOTATION_LOAN))
        if record is not None and by_node.get(name) is not None and by_node[name].pool == record.borrower:
            loans[name] = (record.lender, record.borrower)
    live = [p for p in parsed if p.name not in deleting]
    demand = compute(live, cp, views, bound, waiting, loans)
    return Snapshot(tuple(live), views, cp, demand, tuple(waiting), tuple(warnings))
