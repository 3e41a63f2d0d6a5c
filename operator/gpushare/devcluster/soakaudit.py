"""What the soak's audit log says about ``modeSwitch: Wait``, ACK's plugin restarts and the write
Events (pure; :mod:`gpushare.devcluster.soak`).

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

ACK's device plugin reads its labels only when it starts, so each change of them the operator
writes owes one restart of the node's plugin (docs/concepts/device-plugin.md): the same patch
records it (``gpushare.io/plugin-restart``, Pending, ``since`` the next full second), and the
operator deletes the node's plugin pods created before ``since``, once, with a UID precondition.
:func:`plugin_restarts` replays the log (the plugin pods' creations with their responses, their
bindings and deletions, every node write) and checks each such change against what was deleted.

A pass posts a write Event (``LabelsApplied``, ``LabelsRestored``, ``DriftCorrected``) naming the
nodes whose labels it wrote (:func:`gpushare.policy.events.write_events`): :func:`untold_writes`
finds each label change of the operator's no such Event names soon after it, :func:`unfounded`
each node such an Event names that the operator did not write.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpushare import constants as c
from gpushare.backends.ack import ACK
from gpushare.backends.base import SharingBackend
from gpushare.backends.nvidia import NVIDIA
from gpushare.policy.planner import RestartRecord, plugin_labels_hash

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


def _node_label_writes(
    events: Iterable[Mapping[str, Any]],
) -> Iterator[tuple[Mapping[str, Any], str, str, dict[str, str | None]]]:
    """Each successful create, patch or update of a node that names labels: the record, its verb,
    the node and the labels it writes (None: removed)."""
    for e in events:
        ref = e.get("objectRef") or {}
        if ref.get("resource") != "nodes" or ref.get("subresource") or not _ok(e):
            continue
        verb = str(e.get("verb"))
        written = _labels_written(e.get("requestObject"))
        if verb not in ("create", "patch", "update") or written is None:
            continue
        node = str(ref.get("name") or ((e.get("requestObject") or {}).get("metadata") or {}).get("name"))
        yield e, verb, node, written


def mode_changes(events: Iterable[Mapping[str, Any]]) -> list[ModeChange]:
    """Every change of a node's mode label, in the log's order (creations set the first value)."""
    now: dict[tuple[str, str], str | None] = {}
    out: list[ModeChange] = []
    for e, verb, node, written in _node_label_writes(events):
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


# -- ACK's plugin restarts ---------------------------------------------------------------------------


@dataclass
class PluginPodLife:
    """One of ACK's plugin pods: its node, creation (second resolution, as the operator compares
    it with ``since``) and first deletion (the one that ends it), with who deleted it."""

    name: str
    uid: str
    created: datetime
    node: str | None = None
    deleted: datetime | None = None
    deleted_by: str | None = None


@dataclass(frozen=True)
class PluginChange:
    """A write of ``user`` that changed ACK's plugin labels of ``node`` (``before`` and ``after``:
    their values); ``since``: the Pending restart it recorded (None: none)."""

    node: str
    at: datetime
    before: tuple[str | None, ...]
    after: tuple[str | None, ...]
    user: str
    since: datetime | None
    #: why no restart is owed although none was recorded ("" when one was, or when it is a miss)
    excused: str = ""

    def text(self) -> str:
        return (
            f"node {self.node}: ACK plugin labels {list(self.before)} -> {list(self.after)} by {self.user}"
            f" at {self.at.isoformat()}" + (f" (since {self.since.isoformat()})" if self.since else "")
        )


@dataclass
class RestartAudit:
    """What :func:`plugin_restarts` found: the owed restarts, how each ended, the violations."""

    changes: list[PluginChange]
    #: owed restarts whose old pod the operator deleted (exactly once)
    by_operator: int = 0
    #: owed restarts whose old pods someone else deleted first (the soak's plugin-pod-delete fault)
    by_others: int = 0
    #: owed restarts with no plugin pod created before ``since`` on the node (nothing to delete)
    no_pod: int = 0
    #: owed restarts whose old pod was still there at the node's next change: owed to that one
    carried: int = 0
    #: changes that owe no restart (the plugin saw those values already; restart Never)
    excused: int = 0
    #: (what, evidence: the change and the pod records)
    violations: list[tuple[str, list[str]]] = field(default_factory=list)


def _ack_plugin_pod(obj: Any, namespace: str, labels: Mapping[str, str]) -> bool:
    meta = (obj or {}).get("metadata") or {}
    have = meta.get("labels") or {}
    return meta.get("namespace", namespace) == namespace and all(have.get(k) == v for k, v in labels.items())


def _node_of(pod: Any) -> str | None:
    """A pod's node from its body: ``spec.nodeName``, or the DaemonSet's ``metadata.name`` term."""
    spec = (pod or {}).get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    terms = (
        (
            ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
        )
        or {}
    ).get("nodeSelectorTerms") or []
    for term in terms:
        for f in term.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("values"):
                return str(f["values"][0])
    return None


def plugin_pods(
    events: Iterable[Mapping[str, Any]], namespace: str, labels: Mapping[str, str]
) -> dict[str, PluginPodLife]:
    """ACK's plugin pods (by name) from the log: each creation (its response: name, UID,
    creationTimestamp), its binding to a node and its first successful deletion."""
    pods: dict[str, PluginPodLife] = {}
    for e in events:
        ref = e.get("objectRef") or {}
        if ref.get("resource") != "pods" or ref.get("namespace") != namespace or not _ok(e):
            continue
        sub, verb = ref.get("subresource"), e.get("verb")
        if not sub and verb == "create":
            obj = e.get("responseObject") or {}
            meta = obj.get("metadata") or {}
            if not _ack_plugin_pod(obj, namespace, labels) or not meta.get("name"):
                continue
            created = datetime.fromisoformat(
                str(meta.get("creationTimestamp") or when(e).isoformat()).replace("Z", "+00:00")
            )
            pods[meta["name"]] = PluginPodLife(meta["name"], str(meta.get("uid", "")), created, _node_of(obj))
        elif sub == "binding" and verb == "create" and ref.get("name") in pods:
            target = ((e.get("requestObject") or {}).get("target") or {}).get("name")
            if target:
                pods[ref["name"]].node = str(target)
        elif not sub and verb == "delete" and ref.get("name") in pods:
            pod = pods[ref["name"]]
            if pod.deleted is None:
                pod.deleted, pod.deleted_by = when(e), str((e.get("user") or {}).get("username"))
    return pods


def _annotations_written(obj: Any) -> dict[str, str | None]:
    if isinstance(obj, dict):
        return dict(((obj.get("metadata") or {}).get("annotations")) or {})
    return {}


def plugin_changes(events: Iterable[Mapping[str, Any]], *, by: str) -> list[PluginChange]:
    """Every write of ``by`` that changed a node's ACK plugin labels, with the restart it recorded.
    A change that records none is excused where the node's record already names the new values
    (Done or Pending: the plugin saw, or is about to see, them) or says Skipped (restart Never)."""
    labels: dict[str, dict[str, str | None]] = {}
    records: dict[str, str | None] = {}
    out: list[PluginChange] = []
    keys = ACK.plugin_labels
    for e in events:
        ref = e.get("objectRef") or {}
        verb = e.get("verb")
        if ref.get("resource") != "nodes" or ref.get("subresource") or not _ok(e):
            continue
        if verb not in ("create", "patch", "update"):
            continue
        obj = e.get("requestObject")
        node = str(ref.get("name") or ((obj or {}).get("metadata") or {}).get("name"))
        written = _labels_written(obj) or {}
        annotations = _annotations_written(obj)
        now = labels.setdefault(node, {})
        before = tuple(now.get(k) for k in keys)
        if verb in ("create", "update"):
            now.clear()
        now.update({k: v for k, v in written.items() if k in keys})
        after = tuple(now.get(k) for k in keys)
        old_record = records.get(node)
        if c.ANNOTATION_PLUGIN_RESTART in annotations or verb in ("create", "update"):
            records[node] = annotations.get(c.ANNOTATION_PLUGIN_RESTART)
        user = str((e.get("user") or {}).get("username"))
        if verb == "create" or before == after or user != by:
            continue
        new = RestartRecord.parse(records[node]) if c.ANNOTATION_PLUGIN_RESTART in annotations else None
        since = None
        excused = ""
        if new is not None and new.pending:
            since = datetime.fromisoformat(new.since.replace("Z", "+00:00"))
        elif new is not None and new.state == "Skipped":
            excused = "restart Never (Skipped)"
        else:
            old = RestartRecord.parse(old_record)
            values = dict(zip(keys, after, strict=True))
            if (
                old is not None
                and old.state in ("Done", "Pending")
                and old.hash == plugin_labels_hash(values)
            ):
                excused = f"the node's record already names these values ({old.state})"
        out.append(PluginChange(node, when(e), before, after, user, since, excused))
    return out


def plugin_restarts(
    events: Sequence[Mapping[str, Any]],
    *,
    by: str,
    namespace: str = ACK.default_plugin_namespace,
    labels: Mapping[str, str] = ACK.default_plugin_labels,
) -> RestartAudit:
    """Each ACK plugin restart owed by a label change of ``by`` (the operator), against the plugin
    pods deleted: none doubled, none missed.

    A change owes the deletion of the node's plugin pods created before its ``since`` ("old"),
    between the write and the node's next change (then the next change owes what is left: a pod
    old for one is old for the next, so one deletion serves both, "carried"). Per change:

    * doubled: ``by`` deleted a pod created at or after ``since`` (the plugin had restarted with
      the new labels already), or more than one pod; a deletion by ``by`` where no change was
      owed at all (before the node's first change);
    * missed: a change that records no Pending restart (and is not excused, see
      :func:`plugin_changes`), or, at the node's last change, an old pod nobody ever deleted;
    * not the operator's to do: old pods someone else deleted first (the DaemonSet replaces them
      with new ones, which end the restart), or no old pod at all (the node runs no plugin pod:
      the operator records NoDevicePluginPod).
    """
    ordered = sorted(events, key=when)
    pods = plugin_pods(ordered, namespace, labels)
    audit = RestartAudit(plugin_changes(ordered, by=by))
    by_node: dict[str, list[PluginChange]] = {}
    for ch in audit.changes:
        by_node.setdefault(ch.node, []).append(ch)
    for pod in (p for p in pods.values() if p.deleted_by == by):  # deletions before a node's first change
        first = by_node.get(pod.node or "")
        if not first or (pod.deleted is not None and pod.deleted < first[0].at):
            audit.violations.append(
                (
                    f"doubled: {by} deleted plugin pod {namespace}/{pod.name} of node {pod.node} at"
                    f" {pod.deleted.isoformat() if pod.deleted else '?'}, no restart owed there",
                    [_pod_line(pod)],
                )
            )
    for node, changes in by_node.items():
        on_node = [p for p in pods.values() if p.node == node]
        for i, ch in enumerate(changes):
            nxt = changes[i + 1].at if i + 1 < len(changes) else None
            _one_change(audit, ch, nxt, on_node, by, namespace)
    return audit


def _one_change(
    audit: RestartAudit,
    ch: PluginChange,
    nxt: datetime | None,
    on_node: list[PluginPodLife],
    by: str,
    namespace: str,
) -> None:
    def within(t: datetime | None) -> bool:
        return t is not None and t >= ch.at and (nxt is None or t < nxt)

    mine = [p for p in on_node if p.deleted_by == by and within(p.deleted)]
    evidence = [ch.text(), *(_pod_line(p) for p in on_node)][:12]
    if ch.since is None:
        if ch.excused:
            audit.excused += 1
        else:
            audit.violations.append((f"missed: no restart recorded with the change: {ch.text()}", evidence))
        for p in mine:
            audit.violations.append(
                (
                    f"doubled: {by} deleted plugin pod {namespace}/{p.name} for a change that owes none",
                    evidence,
                )
            )
        return
    since = ch.since
    fresh = [p for p in mine if p.created >= since]
    for p in fresh:
        audit.violations.append(
            (
                f"doubled: {by} deleted plugin pod {namespace}/{p.name} of node {ch.node}, created"
                f" {p.created.isoformat()}, not before since {since.isoformat()}: the plugin had"
                " restarted with these labels already",
                evidence,
            )
        )
    if len(mine) > 1:
        names = ", ".join(p.name for p in mine)
        audit.violations.append(
            (f"doubled: {by} deleted {len(mine)} plugin pods for one change ({names})", evidence)
        )
    old = [p for p in on_node if p.created < since and (p.deleted is None or p.deleted >= ch.at)]
    left = [p for p in old if p.deleted is None or (nxt is not None and p.deleted >= nxt)]
    if any(p in old for p in mine):
        audit.by_operator += 1
    elif not old:
        audit.no_pod += 1
    elif not left:
        audit.by_others += 1
    elif nxt is not None:
        audit.carried += 1
    else:
        names = ", ".join(p.name for p in left)
        audit.violations.append(
            (
                f"missed: plugin pod(s) {names} created before since, never deleted: {ch.text()}",
                evidence,
            )
        )


def _pod_line(p: PluginPodLife) -> str:
    gone = f", deleted {p.deleted.isoformat()} by {p.deleted_by}" if p.deleted else ", never deleted"
    return f"plugin pod {p.name} (uid {p.uid[:8]}) on {p.node}: created {p.created.isoformat()}{gone}"


# -- the Events of the operator's node writes -------------------------------------------------------

#: The Events a pass posts about the node labels it wrote (:func:`gpushare.policy.events.write_events`).
WRITE_REASONS = ("LabelsApplied", "LabelsRestored", "DriftCorrected")
_MORE = re.compile(r" and (\d+) more$")


@dataclass(frozen=True)
class LabelWrite:
    """A write that changed labels of ``node`` (``changed``: their keys), by ``user``."""

    node: str
    at: datetime
    changed: tuple[str, ...]
    user: str


@dataclass(frozen=True)
class Told:
    """A pool's Event about node writes: ``nodes`` named, ``more`` not named ("and N more")."""

    pool: str
    reason: str
    at: datetime
    nodes: frozenset[str]
    more: int
    message: str

    def names(self, node: str) -> bool:
        return node in self.nodes or self.more > 0


def told(pool: str, reason: str, at: datetime, message: str) -> Told | None:
    """The nodes a write Event names (None: not such an Event). Its formats: ``... N node(s): a, b
    and 2 more``; DriftCorrected's ``... N node(s): a: k=v, removed j; b: ...``."""
    if reason not in WRITE_REASONS or " node(s): " not in message:
        return None
    rest = message.split(" node(s): ", 1)[1]
    more = _MORE.search(rest)
    if more is not None:
        rest = rest[: more.start()]
    if reason == "DriftCorrected":
        nodes = [part.split(": ", 1)[0] for part in rest.split("; ")]
    else:
        nodes = rest.split(", ")
    hidden = int(more.group(1)) if more else 0
    return Told(pool, reason, at, frozenset(n for n in nodes if n), hidden, message)


def label_writes(events: Iterable[Mapping[str, Any]]) -> list[LabelWrite]:
    """Every write that changed a node's labels, in the log's order (each node's labels replayed
    from its creation: a create or update names them all, a patch those it changes)."""
    now: dict[str, dict[str, str]] = {}
    out: list[LabelWrite] = []
    for e, verb, node, written in _node_label_writes(events):
        before = now.get(node, {})
        if verb == "patch":
            after = {**before, **{k: v for k, v in written.items() if v is not None}}
            for k, v in written.items():
                if v is None:
                    after.pop(k, None)
        else:
            after = {k: v for k, v in written.items() if v is not None}
        now[node] = after
        changed = tuple(sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k)))
        if verb != "create" and changed:
            out.append(LabelWrite(node, when(e), changed, str((e.get("user") or {}).get("username"))))
    return out


@dataclass(frozen=True)
class Untold:
    """A label write of the operator's no write Event names; ``lost`` says why that is allowed (its
    posting failed and was logged, or the writer was killed before it posted), None: a violation."""

    write: LabelWrite
    lost: str | None


def untold_writes(
    writes: Iterable[LabelWrite],
    events: Sequence[Told],
    *,
    by: str,
    within: timedelta,
    failed_posts: Sequence[datetime],
    kills: Sequence[datetime],
) -> list[Untold]:
    """Each label write ``by`` made that no write Event names within ``within`` after it (an
    Event's time has second resolution: one stamped the write's second counts)."""
    out: list[Untold] = []
    for w in writes:
        if w.user != by:
            continue
        start, end = w.at.replace(microsecond=0), w.at + within
        if any(start <= t.at <= end and t.names(w.node) for t in events):
            continue
        lost = None
        if any(w.at <= f <= end for f in failed_posts):
            lost = "its Event's posting failed (the operator's log says so)"
        elif any(w.at - timedelta(seconds=1) <= k <= end for k in kills):
            lost = "an operator replica was killed before it could post its Event"
        out.append(Untold(w, lost))
    return out


def unfounded(
    events: Iterable[Told], node_writes: Iterable[tuple[str, datetime]], *, within: timedelta
) -> list[tuple[Told, str]]:
    """Each node a write Event names that the operator wrote nothing to in ``within`` before it
    (``node_writes``: each node write of the operator's, labels or annotations: restoring a node
    whose labels are already right removes only the operator's annotations)."""
    writes = list(node_writes)
    return [
        (t, node)
        for t in events
        for node in sorted(t.nodes)
        if not any(n == node and t.at - within <= at <= t.at + timedelta(seconds=1) for n, at in writes)
    ]


# -- evictions ------------------------------------------------------------------------------------


@dataclass
class EvictionAudit:
    """What :func:`evictions` found."""

    #: evictions the apiserver granted (within the pod's PodDisruptionBudget)
    evicted: int = 0
    #: evictions the apiserver refused with 429 (the PodDisruptionBudget allows none now)
    refused: int = 0
    #: workload pods ``by`` deleted itself (each a violation)
    deleted: int = 0
    violations: list[tuple[str, list[str]]] = field(default_factory=list)


def _asks_gpu(pod: Any) -> bool:
    """Whether a pod body asks for a GPU resource (ACK's ``aliyun.com/gpu*`` or NVIDIA's)."""
    for container in ((pod or {}).get("spec") or {}).get("containers") or []:
        res = container.get("resources") or {}
        for key in (*(res.get("limits") or {}), *(res.get("requests") or {})):
            if key.startswith((c.GPU_RESOURCE_PREFIX, "nvidia.com/")):
                return True
    return False


def _line(e: Mapping[str, Any]) -> str:
    ref = e.get("objectRef") or {}
    what = "/".join(x for x in (ref.get("resource"), ref.get("subresource")) if x)
    code = (e.get("responseStatus") or {}).get("code", "")
    user = (e.get("user") or {}).get("username")
    name = f"{ref.get('namespace')}/{ref.get('name')}"
    return f"audit {when(e).isoformat()} {user} {e.get('verb')} {what} {name} -> {code}"


def evictions(
    events: Sequence[Mapping[str, Any]],
    *,
    by: str,
    evict_pools: Collection[str],
    namespaces: Collection[str],
) -> EvictionAudit:
    """No pod evicted except under Evict, within its PDB (from the log, replayed in time order).

    Every eviction (``create pods/eviction``) must be ``by``'s, of a pod that asks for a GPU and is
    bound to a node that, at that moment, is in one of ``evict_pools`` (its ``gpushare.io/pool``
    label, or the pool its ownership annotation names while it is being restored). Going through
    the eviction API is what holds it to the pod's PodDisruptionBudget: the apiserver grants it only
    within the budget (429 otherwise, counted as refused). ``by`` deleting a pod of ``namespaces``
    itself (not through the eviction API) would bypass the budget: a violation.
    """
    ordered = sorted(events, key=when)
    pool_label: dict[str, str | None] = {}
    owner: dict[str, str | None] = {}
    bound: dict[str, str] = {}
    gpu: dict[str, bool] = {}
    audit = EvictionAudit()
    budgets: list[str] = []  # the PodDisruptionBudgets' writes so far: evidence around an eviction
    for e in ordered:
        ref = e.get("objectRef") or {}
        resource, sub, verb = ref.get("resource"), ref.get("subresource"), e.get("verb")
        if resource == "poddisruptionbudgets" and _ok(e):
            status = (e.get("requestObject") or {}).get("status") or {}
            budgets.append(f"{_line(e)} disruptionsAllowed={status.get('disruptionsAllowed')}")
            continue
        user = str((e.get("user") or {}).get("username"))
        code = int((e.get("responseStatus") or {}).get("code", 0))
        if resource == "nodes" and not sub and _ok(e) and verb in ("create", "patch", "update"):
            obj = e.get("requestObject")
            node = str(ref.get("name") or ((obj or {}).get("metadata") or {}).get("name"))
            written = _labels_written(obj) or {}
            if verb != "patch" or c.LABEL_POOL in written:
                pool_label[node] = written.get(c.LABEL_POOL)
            annotations = _annotations_written(obj)
            if verb != "patch" or c.ANNOTATION_OWNED in annotations:
                raw = annotations.get(c.ANNOTATION_OWNED)
                owner[node] = _owned_pool(raw) if raw else None
            continue
        if resource != "pods" or (not _ok(e) and code != 429):
            continue
        key = f"{ref.get('namespace')}/{ref.get('name')}"
        if not sub and verb == "create":
            obj = e.get("responseObject") or e.get("requestObject") or {}
            meta = obj.get("metadata") or {}
            key = f"{meta.get('namespace') or ref.get('namespace')}/{meta.get('name') or ref.get('name')}"
            gpu[key] = _asks_gpu(obj)
            if (obj.get("spec") or {}).get("nodeName"):
                bound[key] = str(obj["spec"]["nodeName"])
        elif sub == "binding" and verb == "create":
            target = ((e.get("requestObject") or {}).get("target") or {}).get("name")
            if target:
                bound[key] = str(target)
        elif sub == "eviction" and verb == "create":
            before = len(audit.violations)
            _one_eviction(
                audit,
                e,
                key,
                user,
                by=by,
                node=bound.get(key),
                gpu=gpu.get(key),
                pools=(pool_label, owner),
                evict_pools=evict_pools,
            )
            for _what, evidence in audit.violations[before:]:
                evidence.extend(b for b in budgets[-4:] if f" {ref.get('namespace')}/" in b)
        elif not sub and verb == "delete" and user == by and ref.get("namespace") in namespaces and _ok(e):
            audit.deleted += 1
            audit.violations.append(
                (
                    f"{by} deleted pod {key} itself, not through pods/eviction: its PDB was not asked",
                    [_line(e)],
                )
            )
    return audit


def _owned_pool(raw: str) -> str | None:
    """The pool named by a node's ``gpushare.io/owned-labels`` annotation ({"pool": ..., "prior": ...})."""
    try:
        pool = json.loads(raw).get("pool")
    except (ValueError, AttributeError):
        return None
    return str(pool) if pool else None


def _one_eviction(
    audit: EvictionAudit,
    e: Mapping[str, Any],
    key: str,
    user: str,
    *,
    by: str,
    node: str | None,
    gpu: bool | None,
    pools: tuple[Mapping[str, str | None], Mapping[str, str | None]],
    evict_pools: Collection[str],
) -> None:
    code = int((e.get("responseStatus") or {}).get("code", 0))
    if code == 429:
        audit.refused += 1
        return
    audit.evicted += 1
    label, owner = pools
    pool = (label.get(node) or owner.get(node)) if node else None
    where = f"on node {node} of pool {pool}" if node else "bound to no node"
    if user != by:
        audit.violations.append((f"{user} evicted pod {key} {where}: only {by} evicts", [_line(e)]))
    elif pool not in evict_pools:
        audit.violations.append(
            (
                f"{by} evicted pod {key} {where}: not a pool with modeSwitch Evict",
                [_line(e)],
            )
        )
    elif gpu is False:
        audit.violations.append(
            (f"{by} evicted pod {key} {where}, which asks for no GPU: it held no switch", [_line(e)])
        )
