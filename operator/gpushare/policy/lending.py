"""Opt-in lending: which idle nodes to lend to which pool, and which loans to end. Pure.

A pool with ``spec.lending: {to: [...], keepIdle, returnAfterSeconds}`` lends idle nodes to the
pools it names while their GPU pods wait for want of GPU resources, as
:func:`gpushare.policy.advise.advise` proposes (per-GPU fit), never below ``keepIdle`` idle
nodes of its own. A loan is one annotation on the node (``gpushare.io/loan``, written with the
node's resourceVersion): the planner then moves the node to the borrower through the usual
guarded rollout (labels, plugin restart, effective-mode confirmation). A loan ends (the
annotation is removed; the node goes back the same way) when

* the borrower has not needed the node for the lender's ``returnAfterSeconds``: no unfinished
  GPU pod on the node and none of the borrower's pods waiting (the clock starts again whenever the
  operator starts: a loan may last longer, never shorter);
* the lender no longer lends to the borrower (lending removed, or the borrower left ``to``), the
  borrower is gone, or the lender no longer selects the node, once the node runs no GPU pod;
* a GPU pod landed on the node before it switched (it still carries the lender's labels): the
  loan is given up at once and the node stays with the lender.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpushare import constants as c
from gpushare.api.loan import LoanRecord
from gpushare.api.v1alpha1 import GPUSharePool
from gpushare.backends import backend_for
from gpushare.policy.advise import Move, advise, gpu_count
from gpushare.policy.demand import PoolDemand, iso
from gpushare.policy.views import NodeView


@dataclass(frozen=True)
class Lend:
    node: str
    record: LoanRecord
    move: Move


@dataclass(frozen=True)
class Return:
    node: str
    record: LoanRecord
    reason: str
    message: str


@dataclass(frozen=True)
class LendingDecision:
    lend: tuple[Lend, ...] = ()
    returns: tuple[Return, ...] = ()
    #: Node → when the borrower last needed it (the caller keeps it between passes).
    needed: Mapping[str, datetime] | None = None
    #: Seconds until the next loan may be due back (None: no loan).
    next_due: float | None = None


def loans_of(nodes: Mapping[str, NodeView]) -> dict[str, LoanRecord]:
    out = {}
    for name, view in nodes.items():
        record = LoanRecord.parse(view.annotations.get(c.ANNOTATION_LOAN))
        if record is not None:
            out[name] = record
    return out


def lenders_for(pools: Sequence[GPUSharePool]) -> dict[str, list[str]]:
    """Borrower → the pools that lend to it."""
    out: dict[str, list[str]] = {}
    for p in sorted(pools, key=lambda p: p.name):
        if p.spec.lending is None:
            continue
        for borrower in p.spec.lending.to:
            if borrower != p.name:
                out.setdefault(borrower, []).append(p.name)
    return out


def record_for(move: Move, view: NodeView, lender: GPUSharePool, now: datetime) -> LoanRecord:
    """The loan of ``view`` to the move's borrower, with the node's size as the lender's backend
    sees it now (counted for the borrower while the node's plugin rereads its labels)."""
    size = backend_for(lender.spec).size(lender.spec, view.allocatable, gpu_count(view, lender))
    return LoanRecord(
        move.lender, move.borrower, iso(now), gpus=size.gpus, gpu_mem=size.per_gpu, unit=size.unit
    )


def decide_loans(
    pools: Sequence[GPUSharePool],
    demand: Mapping[str, PoolDemand],
    nodes: Mapping[str, NodeView],
    busy: set[str],
    *,
    now: datetime,
    needed: Mapping[str, datetime] | None = None,
) -> LendingDecision:
    by_name = {p.name: p for p in pools}
    loans = loans_of(nodes)
    allowed = lenders_for(pools)
    last = dict(needed or {})
    returns: list[Return] = []
    moving: dict[str, list[tuple[str, LoanRecord]]] = {}
    next_due: float | None = None
    for node, loan in sorted(loans.items()):
        view = nodes[node]
        lender, borrower = by_name.get(loan.lender), by_name.get(loan.borrower)
        on_lender_labels = view.labels.get(c.LABEL_POOL) == loan.lender
        if node in busy and on_lender_labels:
            why = f"a GPU pod landed on {node} before it switched to pool {loan.borrower}"
            returns.append(Return(node, loan, "LoanRaced", why))
            continue
        valid = (
            lender is not None
            and borrower is not None
            and loan.lender in allowed.get(loan.borrower, ())
            and lender.spec.node_selector.matches(view.labels)
        )
        if node in busy or (borrower is not None and demand.get(borrower.name, PoolDemand("")).waiting):
            last[node] = now
        last.setdefault(node, now)
        if node in busy:
            continue
        if not valid:
            why = f"pool {loan.lender} no longer lends {node} to pool {loan.borrower}"
            returns.append(Return(node, loan, "LoanEnded", why))
            continue
        assert lender is not None and lender.spec.lending is not None
        after = timedelta(seconds=lender.spec.lending.return_after_seconds)
        idle_for = now - last[node]
        if idle_for >= after:
            returns.append(Return(node, loan, "LoanReturned",
                                  f"pool {loan.borrower} has not needed {node} for "
                                  f"{int(idle_for.total_seconds())}s (returnAfterSeconds "
                                  f"{lender.spec.lending.return_after_seconds})"))  # fmt: skip
            continue
        left = (after - idle_for).total_seconds()
        next_due = left if next_due is None else min(next_due, left)
        moving.setdefault(loan.borrower, []).append((node, loan))
    for node in list(last):
        if node not in loans:
            del last[node]
    lend: list[Lend] = []
    if allowed:
        advice = advise(pools, demand, nodes, now=now, lenders=allowed, moving=moving)
        for move in advice.moves:
            view = nodes[move.node]
            if move.node in busy or move.node in loans:
                continue
            record = record_for(move, view, by_name[move.lender], now)
            lend.append(Lend(move.node, record, move))
    return LendingDecision(tuple(lend), tuple(returns), last, next_due)
