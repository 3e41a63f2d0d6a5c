"""What one reconcile pass works on (:class:`PassScope`: data only), what its phases leave for the
reconciler to apply (:class:`Effects`) and what it returns (:class:`PassResult`).

The phases (``apply``, ``restarts``, ``report``) take the scope and the few long-lived parts each
needs (the store, the plan cache, the writes layer, their memories), never the reconciler.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from gpushare.api.v1alpha1 import GPUSharePool
from gpushare.backends import backend_for
from gpushare.policy.decide import RESYNC


@dataclass
class PassResult:
    """What one pass did and what it still waits for."""

    pool: str
    #: True when nothing is left for this pool: no node to restore, restart owed or node held.
    done: bool = True
    #: Seconds until the next pass unless a change it concerns comes first.
    requeue: float = RESYNC
    #: Whether that next pass, if nothing woke it first, plans every node again.
    resync: bool = True
    patched: int = 0
    #: Patches refused because the node had changed since it was planned (planned again next pass).
    conflicts: int = 0
    errors: dict[str, str] = field(default_factory=dict)
    summary: str = ""


@dataclass
class Effects:
    """What a phase leaves for the reconciler to apply to the store and the other pools' loops."""

    #: Nodes to plan again (a refused or failed write, a batch not confirmed).
    dirty: set[str] = field(default_factory=set)
    #: Nodes the apiserver says are gone (a 404 on a write the watch had not shown yet).
    gone: set[str] = field(default_factory=set)
    #: Pools concerned by a node this pass wrote (``ORPHANS``: the owner of vanished pools' nodes).
    wake: set[str] = field(default_factory=set)

    def drain(self) -> Effects:
        """These effects, and this accumulator empty again."""
        out = Effects(set(self.dirty), set(self.gone), set(self.wake))
        self.dirty.clear()
        self.gone.clear()
        self.wake.clear()
        return out


@dataclass(frozen=True)
class PassScope:
    """One pass of one pool, as data: the pool, the pass's clock, what it knows of the others, and
    the effects its phases leave (``effects``, applied by the reconciler after each phase)."""

    name: str
    uid: str
    raw: Mapping[str, Any]
    #: None for a pool whose spec does not parse.
    model: GPUSharePool | None
    now: datetime
    live: frozenset[str]
    #: Whether this pool also acts on the nodes of vanished pools (``policy.decide.orphan_owner``).
    orphans: bool
    deleting: bool
    ref: Mapping[str, str]
    log: structlog.stdlib.BoundLogger
    effects: Effects = field(default_factory=Effects)

    @property
    def mode(self) -> str:
        return backend_for(self.model.spec).pool_mode(self.model.spec) if self.model else ""
