"""What the soak's audit log says about ``modeSwitch: Wait`` (pure; :mod:`gpushare.devcluster.soak`).

Under Wait, no node's mode may change while a pod using its GPUs runs there. The apiserver's audit
log records both sides: each pod's binding to a node (``create pods/binding`` by kube-scheduler,
its commit time) and its deletion, and each node write with its labels. Replaying the node writes
gives every change of a node's mode label, its old and new value and who made it; the backend of
that label says whether the change disrupts pods holding the node's GPUs
(:meth:`gpushare.backends.base.SharingBackend.disrupts`, ``holds_shared_gpu``).

A change the operator made while such a pod was bound there breaks the guard, except in one case
the guard documents: a pod bound in the instant between the operator's last look at the node's
pods and its write (Wait does not cordon). A pod bound less than ``race_s`` before the write is
counted as that race and reported apart, with the records around it; any other is a violation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gpushare import constants as c
from gpushare.backends.ack import ACK
from gpushare.backends.base import SharingBackend
from gpushare.backends.nvidia import NVIDIA

#: The mode label of each backend a soak pool uses, with its backend.
MODE_LABELS: dict[str, SharingBackend] = {c.LABEL_SCHEDULE: ACK, c.LABEL_NVIDIA_CONFIG: NVIDIA}


@dataclass(frozen=True)
class ModeChange:
    """A write that changed a node's mode label (``old`` None: the label was absent)."""

    node: str
    at: datetime
    label: str
    old: str | None
    new: str | None
    user: str


@dataclass(frozen=True)
class Occupancy:
    """Pod ``pod`` (namespace/name) bound to ``node`` from ``bound`` until ``gone`` (None: at the end)."""

    pod: str
    node: str
    bound: datetime
    gone: datetime | None


@dataclass(frozen=True)
class Breach:
    """A disrupting mode change made while ``occupancy``'s pod was bound to the node."""

    change: ModeChange
    occupancy: Occupancy
    race: bool

    def text(self) -> str:
        lead = (self.change.at - self.occupancy.bound).total_seconds()
        return (
            f"node {self.change.node}: {self.change.label} {self.change.old} -> {self.change.new} by "
            f"{self.change.user} at {self.change.at.isoformat()}, while pod {self.occupancy.pod} was "
            f"bound there (since {lead:.2f}s before the write)"
        )


def when(event: Mapping[str, Any]) -> datetime:
    """An audit event's commit time (``stageTimestamp``, its request's time where absent)."""
    raw = str(event.get("stageTimestamp") or event.get("requestReceivedTimestamp"))
    return datetime.fromisoformat(raw.replace("Z", "+00:00"))


def _ok(event: Mapping[str, Any]) -> bool:
    return 200 <= int((event.get("responseStatus") or {}).get("code", 0)) < 300


def _labels_written(obj: Any) -> dict[str, str | None] | None:
    """The labels a node write sets (None: removed), from a create or a merge patch; a JSON patch's
    ``/metadata/labels/...`` operations too. None when the write names no label."""
    if isinstance(obj, dict):
        labels = (obj.get("metadata") or {}).get("labels")
        return dict(labels) if isinstance(labels, dict) else None
    if isinstance(obj, list):
        out: dict[str, str | None] = {}
        for op in obj:
            path = str(op.get("path", ""))
            if path.startswith("/metadata/labels/"):
                key = path[len("/metadata/labels/") :].replace("~1", "/").replace("~0", "~")
                out[key] = None if op.get("op") == "remove" else op.get("value")
        return out or None
    return None


def mode_changes(events: Iterable[Mapping[str, Any]]) -> list[ModeChange]:
    """Every change of a node's mode label, in the log's order (creations set the first value)."""
    now: dict[tuple[str, str], str | None] = {}
    out: list[ModeChange] = []
    for e in events:
        ref = e.get("objectRef") or {}
        if ref.get("resource") != "nodes" or ref.get("subresource") or not _ok(e):
            continue
        verb = e.get("verb")
        written = _labels_written(e.get("requestObject"))
        if verb not in ("create", "patch", "update") or written is None:
            continue
        node = str(ref.get("name") or ((e.get("requestObject") or {}).get("metadata") or {}).get("name"))
        for label in MODE_LABELS:
            if verb == "create" or verb == "update":
                new = written.get(label)
            elif label in written:
                new = written[label]
            else:
                continue
            old = now.get((node, label))
            now[(node, label)] = new
            if verb != "create" and old != new:
                user = str((e.get("user") or {}).get("username"))
                out.append(ModeChange(node, when(e), label, old, new, user))
    return out


def occupancies(events: Iterable[Mapping[str, Any]], pods: Iterable[str]) -> list[Occupancy]:
    """When each of ``pods`` (namespace/name) was bound to a node, until its deletion."""
    wanted = set(pods)
    bound: dict[str, tuple[str, datetime]] = {}
    out: list[Occupancy] = []
    for e in events:
        ref = e.get("objectRef") or {}
        key = f"{ref.get('namespace')}/{ref.get('name')}"
        if ref.get("resource") != "pods" or key not in wanted or not _ok(e):
            continue
        if ref.get("subresource") == "binding" and e.get("verb") == "create":
            target = ((e.get("requestObject") or {}).get("target") or {}).get("name")
            if target:
                bound[key] = (str(target), when(e))
        elif not ref.get("subresource") and e.get("verb") == "delete" and key in bound:
            node, since = bound.pop(key)
            out.append(Occupancy(key, node, since, when(e)))
    out.extend(Occupancy(key, node, since, None) for key, (node, since) in bound.items())
    return out


def wait_breaches(
    changes: Iterable[ModeChange],
    occupied: Iterable[Occupancy],
    holds: Mapping[str, Mapping[str, int]],
    *,
    by: str,
    race_s: float,
) -> list[Breach]:
    """The mode changes ``by`` made while a pod holding the node's GPUs (``holds``: each pod's
    requests) was bound there and that the label's backend calls disrupting; ``race`` set on those
    whose pod was bound less than ``race_s`` before the write."""
    pods = list(occupied)
    out: list[Breach] = []
    for change in changes:
        backend = MODE_LABELS[change.label]
        old, new = (backend.mode_of({change.label: v}) for v in (change.old, change.new))
        if change.user != by or not backend.disrupts(old, new):
            continue
        for occ in pods:
            running = occ.bound <= change.at and (occ.gone is None or occ.gone > change.at)
            if occ.node != change.node or not running:
                continue
            if not backend.holds_shared_gpu(holds.get(occ.pod, {})):
                continue
            race = change.at - occ.bound < timedelta(seconds=race_s)
            out.append(Breach(change, occ, race))
    return out
