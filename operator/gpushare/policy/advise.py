"""``gpushare advise`` and the lending loop: which idle nodes, moved from which pools, let which
waiting pods schedule. Pure.

The fit is simulated as the borrower's backend sees a node once it has the borrower's labels and
its plugin reread them (``SharingBackend``'s fit model):

* the node's room (``room``): per GPU, an amount and a compute share in the borrower's units
  (ACK: ``gpushare.backends.ack.fit``), or one entry of slots (NVIDIA: replicas x physical GPUs),
  or one entry per kind of device (``entry_resources``: a MIG pool's profiles);
  a node already lent counts with the size its loan recorded (its plugin may be restarting);
* what a pod takes (``take``): on how many of those entries, and how much of each; the borrower's
  placement picks the entries (binpack: the fullest that fits; spread: the emptiest), unless the
  backend names them (``take_on``: a MIG pool's room holds one entry per profile); a pod the
  borrower's backend can never serve (``fit_problem``), or one asking for another backend's
  sharing, does not go there;
* the node must satisfy the pod's node constraints with the borrower's labels on it (pods reach a
  borrowed node through ``gpushare.io/pool``: a nodeSelector on the borrower's own selector labels
  does not match a node the lender selects).

Not simulated: CPU, memory, taints and tolerations, pod (anti-)affinity, and room left on the
borrower's own nodes (the pods wait: there is none). Pods are placed oldest first; a node is moved
only for a pod that fits on it (:func:`check` verifies every proposal independently).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from gpushare import constants as c
from gpushare.api.loan import LoanRecord
from gpushare.api.selector import term_possible
from gpushare.api.v1alpha1 import GPUSharePool
from gpushare.backends import BACKENDS, GpuSize, backend_for, gpus_of
from gpushare.policy.demand import PoolDemand, WaitingPod
from gpushare.policy.planner import NodePlan, desired_labels, plan
from gpushare.policy.views import NodeView


@dataclass
class _Gpu:
    """One entry of a node's room: an amount (memory, or slots) and a compute share left."""

    mem: int
    core: int


@dataclass(frozen=True)
class Placement:
    pod: str
    #: GPU index → gpu-mem (and gpu-core) the pod takes there.
    gpus: Mapping[int, tuple[int, int]]


@dataclass(frozen=True)
class Move:
    """Move ``node`` from pool ``lender`` to pool ``borrower``: ``placements`` then fit on it."""

    node: str
    lender: str
    borrower: str
    placements: tuple[Placement, ...]
    #: The planner's plan for the node once lent (label patch, plugin restart).
    plan: NodePlan | None = None
    #: Per GPU (memory in the borrower's unit, compute %) as simulated.
    gpus: tuple[tuple[int, int], ...] = ()

    @property
    def pods(self) -> tuple[str, ...]:
        return tuple(p.pod for p in self.placements)


@dataclass(frozen=True)
class Stuck:
    pod: WaitingPod
    pools: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Advice:
    moves: tuple[Move, ...] = ()
    pending: tuple[Stuck, ...] = ()
    #: Pool → its idle nodes left (not moved).
    idle_left: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def gpu_count(node: NodeView, lender: GPUSharePool) -> int:
    """The node's physical GPUs (0: unknown), while it is in ``lender``."""
    return gpus_of(node.labels, node.allocatable, lender.spec)


def node_gpus(
    node: NodeView, lender: GPUSharePool, borrower: GPUSharePool, loan: LoanRecord | None = None
) -> list[_Gpu]:
    """The node's room as the borrower's plugin will advertise it (empty: unknown). A node
    already lent counts with the size its loan recorded (its plugin may be restarting)."""
    size = GpuSize(loan.gpus, loan.gpu_mem, loan.unit) if loan is not None else None
    room = backend_for(borrower.spec).room(
        borrower.spec, lender.spec, node.allocatable, node.labels, gpu_count(node, lender), size
    )
    return [_Gpu(amount, compute) for amount, compute in room]


def labels_after(node: NodeView, borrower: GPUSharePool) -> dict[str, str]:
    return {**node.labels, **desired_labels(borrower.spec, borrower.name)}


def reachable(pod: WaitingPod, node: NodeView, borrower: GPUSharePool) -> bool:
    """Whether the pod's node constraints hold on the node with the borrower's labels."""
    labels = {k: frozenset((v,)) for k, v in labels_after(node, borrower).items()}
    return any(term_possible(term, labels, exact=True, name=node.name) for term in pod.constraints.terms)


def kind_problem(pod: WaitingPod, borrower: GPUSharePool) -> str | None:
    """Why the pod can never go to the borrower's nodes (None: it can, room permitting)."""
    backend = backend_for(borrower.spec)
    other = next((b for b in BACKENDS.values() if b is not backend and b.sharing_only(pod.requests)), None)
    if other is not None:
        return f"pool {borrower.name} is {backend.pool_words}, and the pod asks for {other.ask_words}"
    return backend.fit_problem(borrower.name, borrower.spec, pod.requests, pod.gpus)


def place(pod: WaitingPod, gpus: Sequence[_Gpu], borrower: GPUSharePool) -> dict[int, tuple[int, int]] | None:
    """Where the pod goes on the borrower's node (entry index → (amount, compute) it takes there),
    or None. Does not change ``gpus``."""
    backend = backend_for(borrower.spec)
    named = backend.take_on(borrower.spec, pod.requests)
    if named is not None:  # the backend names the entries (a MIG pod: its profiles' devices)
        fits = all(
            0 <= i < len(gpus) and gpus[i].mem >= a and gpus[i].core >= k for i, (a, k) in named.items()
        )
        return dict(named) if named and fits else None
    count, (amount, compute) = backend.take(borrower.spec, pod.requests, pod.gpus)
    if amount <= 0:
        return None
    ok = [i for i, g in enumerate(gpus) if g.mem >= amount and g.core >= compute]
    if len(ok) < count:
        return None
    binpack = borrower.spec.placement == "binpack"
    ok.sort(key=lambda i: (gpus[i].mem, i) if binpack else (-gpus[i].mem, i))
    return dict.fromkeys(ok[:count], (amount, compute))


def _take(gpus: list[_Gpu], where: Mapping[int, tuple[int, int]]) -> None:
    for i, (mem, core) in where.items():
        gpus[i].mem -= mem
        gpus[i].core -= core


def lent_plan(
    node: NodeView, lender: str, borrower: str, pools: Sequence[GPUSharePool], now: datetime
) -> NodePlan:
    """The planner's plan for ``node`` once it carries a loan to ``borrower``."""
    record = LoanRecord(lender, borrower)
    lent = replace(node, annotations={**node.annotations, c.ANNOTATION_LOAN: record.dump()})
    return plan(pools, [lent], now=now).nodes[0]


def advise(
    pools: Sequence[GPUSharePool],
    demand: Mapping[str, PoolDemand],
    nodes: Mapping[str, NodeView],
    *,
    now: datetime,
    lenders: Mapping[str, Sequence[str]] | None = None,
    keep_idle: Mapping[str, int] | None = None,
    moving: Mapping[str, Sequence[tuple[str, LoanRecord]]] | None = None,
) -> Advice:
    """Moves of idle nodes that let waiting pods schedule.

    ``lenders``: borrower → the pools it may take nodes from (default: every other pool);
    ``keep_idle``: pool → idle nodes it keeps (default: its ``spec.lending.keepIdle``, else 0);
    ``moving``: borrower → nodes already lent to it and running no GPU pod yet (node, loan): the
    waiting pods are placed there first, and only what is left asks for new moves.
    """
    by_name = {p.name: p for p in pools}
    keep = {p.name: (p.spec.lending.keep_idle if p.spec.lending else 0) for p in pools}
    keep.update(keep_idle or {})
    spare = {
        name: list(d.idle[keep.get(name, 0) :]) if keep.get(name, 0) < len(d.idle) else []
        for name, d in demand.items()
    }
    # Borrowers whose pods wait longest first.
    order = sorted(
        (d for d in demand.values() if d.waiting and d.pool in by_name),
        key=lambda d: (d.oldest or now, d.pool),
    )
    handled: set[str] = set()
    moves: list[Move] = []
    pending: list[Stuck] = []
    pools_of: dict[str, list[str]] = {}
    for d in demand.values():
        for pod in d.waiting:
            pools_of.setdefault(pod.key, []).append(d.pool)
    for d in order:
        borrower = by_name[d.pool]
        allowed = (
            list(lenders.get(d.pool, ()))
            if lenders is not None
            else [p.name for p in pools if p.name != d.pool]
        )
        opened: list[tuple[Move, list[_Gpu], list[Placement]]] = []
        existing: set[str] = set()
        for name, loan in (moving or {}).get(d.pool, ()):
            view = nodes.get(name)
            lender_pool = by_name.get(loan.lender)
            if view is None or lender_pool is None:
                continue
            existing.add(name)
            opened.append(
                (Move(name, loan.lender, d.pool, ()), node_gpus(view, lender_pool, borrower, loan), [])
            )
        for pod in d.waiting:
            if pod.key in handled:
                continue
            problem = kind_problem(pod, borrower)
            if problem is not None:
                continue  # another target pool may take it; reported below if none does
            placed = False
            for move, gpus, placements in opened:
                if not reachable(pod, nodes[move.node], borrower):
                    continue
                where = place(pod, gpus, borrower)
                if where is not None:
                    _take(gpus, where)
                    placements.append(Placement(pod.ref, where))
                    placed = True
                    break
            if not placed:
                for lender in allowed:
                    lender_pool = by_name.get(lender)
                    if lender_pool is None or lender == d.pool:
                        continue
                    for name in list(spare.get(lender, ())):
                        view = nodes.get(name)
                        if view is None or not reachable(pod, view, borrower):
                            continue
                        gpus = node_gpus(view, lender_pool, borrower)
                        where = place(pod, gpus, borrower)
                        if where is None:
                            continue
                        _take(gpus, where)
                        spare[lender].remove(name)
                        opened.append((Move(name, lender, d.pool, ()), gpus, [Placement(pod.ref, where)]))
                        placed = True
                        break
                    if placed:
                        break
            if placed:
                handled.add(pod.key)
        for move, _gpus, placements in opened:
            if move.node in existing:
                continue
            view = nodes[move.node]
            moves.append(
                replace(
                    move,
                    placements=tuple(placements),
                    plan=lent_plan(view, move.lender, move.borrower, pools, now),
                    gpus=tuple((g.mem, g.core) for g in node_gpus(view, by_name[move.lender], borrower)),
                )
            )
    for d in order:
        for pod in d.waiting:
            if pod.key in handled:
                continue
            handled.add(pod.key)
            targets = tuple(sorted(set(pools_of.get(pod.key, [d.pool]))))
            problems = [kind_problem(pod, by_name[t]) for t in targets if t in by_name]
            why = next((p for p in problems if p), None) or (
                "no idle node of another pool fits it per GPU, or reaches it with the pool's labels"
            )
            pending.append(Stuck(pod, targets, why))
    return Advice(
        moves=tuple(moves),
        pending=tuple(pending),
        idle_left={k: tuple(v) for k, v in spare.items()},
    )


def check(advice: Advice, pools: Sequence[GPUSharePool], nodes: Mapping[str, NodeView],
          waiting: Mapping[str, WaitingPod]) -> list[str]:  # fmt: skip
    """Independent check of a proposal: every move serves at least one pod, every placement is on
    GPUs that exist with room for it, the pod's kind suits the borrower and reaches the node, and
    no pod is placed twice. Returns the problems (empty: sound)."""
    by_name = {p.name: p for p in pools}
    problems: list[str] = []
    seen: set[str] = set()
    moved: set[str] = set()
    for move in advice.moves:
        if move.node in moved:
            problems.append(f"{move.node} moved twice")
        moved.add(move.node)
        if not move.placements:
            problems.append(f"{move.node}: moved for no pod")
        borrower, lender = by_name[move.borrower], by_name[move.lender]
        gpus = node_gpus(nodes[move.node], lender, borrower)
        for placement in move.placements:
            pod = waiting[placement.pod]
            if placement.pod in seen:
                problems.append(f"{placement.pod} placed twice")
            seen.add(placement.pod)
            if kind_problem(pod, borrower) is not None:
                problems.append(f"{placement.pod}: {kind_problem(pod, borrower)}")
            if not reachable(pod, nodes[move.node], borrower):
                problems.append(f"{placement.pod} cannot reach {move.node}")
            backend = backend_for(borrower.spec)
            wants, each = backend.take(borrower.spec, pod.requests, pod.gpus)
            named = backend.take_on(borrower.spec, pod.requests)
            if len(placement.gpus) != wants:
                problems.append(f"{placement.pod}: on {len(placement.gpus)} GPUs, wants {wants}")
            if named is not None and dict(placement.gpus) != dict(named):
                problems.append(f"{placement.pod}: placed on {dict(placement.gpus)}, asks for {dict(named)}")
            for i, (mem, core) in placement.gpus.items():
                if not 0 <= i < len(gpus):
                    problems.append(f"{placement.pod}: GPU {i} of {move.node} does not exist")
                    continue
                gpus[i].mem -= mem
                gpus[i].core -= core
                if named is None and (mem, core) != each:
                    problems.append(
                        f"{placement.pod}: placed {mem}/{core} on GPU {i}, asks for {each[0]}/{each[1]}"
                    )
                if gpus[i].mem < 0 or gpus[i].core < 0:
                    problems.append(f"{move.node} GPU {i} overcommitted by {placement.pod}")
    return problems
