"""A seeded fault-injection soak: pools edited, GPU pods coming and going, faults overlapping; then
the operator's guarantees checked against what really happened (docs/how-to/soak.md).

``python -m gpushare.devcluster.soak --seed N --minutes M`` (``make soak SEED=N MINUTES=M``) starts
a control plane of its own (``DevCluster`` with an audit log), kwok nodes in two ACK node pools, one
left out of every pool, and an NVIDIA node pool (``pluginsim`` plays both device plugins), the
operator as two replicas behind Kopf peering (``gpushare run``) and the webhook as a process of its
own (``gpushare webhook``, failurePolicy Fail), as the chart runs them. It prints the schedule the
seed makes (the same seed, the same schedule), runs it, heals every fault, lets the cluster settle
and checks the invariants. The report names each kind of work and fault with its count, the
invariants checked and each violation with the audit records and Events around it; any violation
fails the run (exit 1) and names the seed.

The operator and the webhook run as users of their own (``gpushare-operator``,
``gpushare-webhook``), so the apiserver's audit log tells their writes from the soak's.
They reach the apiserver through a relay of the soak's (:mod:`gpushare.devcluster.cutproxy`),
which the fault ``watch-cut`` uses to cut every one of their connections at once.
Development harness only, like the rest of ``gpushare.devcluster``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import aiohttp
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare import constants as c
from gpushare.admission.review import MAX_REVIEW_BYTES
from gpushare.api.v1alpha1 import GPUSharePoolSpec
from gpushare.backends.ack import ACK
from gpushare.backends.ack.admission.catalog import TARGET_AMBIGUOUS
from gpushare.devcluster import nvidia as nv
from gpushare.devcluster.binaries import BinariesMissing
from gpushare.devcluster.cluster import ClusterInfo, DevCluster, free_port
from gpushare.devcluster.crds import install_crd_files
from gpushare.devcluster.cutproxy import CutProxy
from gpushare.devcluster.demo import (
    DEMO_POOLS,
    NVIDIA_CONFIGS,
    NVIDIA_NODE_POOL,
    DemoNodePool,
    create_demo_nodes,
    create_nvidia_nodes,
)
from gpushare.devcluster.fakes import (
    PLUGIN_NODE_SELECTOR,
    POOL_LABEL,
    RealNodePlugin,
    ensure_device_plugin_daemonset,
    plugin_pods_on,
    pod_running_and_ready,
    wait_for,
)
from gpushare.devcluster.realnode import IMAGE_WORKLOAD, RealNodeUnavailable
from gpushare.devcluster.soakaudit import (
    WRITE_REASONS,
    Told,
    evictions,
    label_writes,
    mode_changes,
    occupancies,
    plugin_restarts,
    told,
    unfounded,
    untold_writes,
    wait_breaches,
    when,
)
from gpushare.k8s.client import make_api_client
from gpushare.policy.planner import RestartRecord, desired_labels

REPO = Path(__file__).resolve().parents[3]
CRDS = (
    REPO / "crds" / "gpushare.io_gpusharepools.yaml",
    REPO / "manifests" / "crd" / "kopf.dev_clusterkopfpeerings.yaml",
)
OPERATOR_USER = "gpushare-operator"
WEBHOOK_USER = "gpushare-webhook"
NAMESPACE = "soak"
#: where the operator posts its Events (its --events-namespace default)
EVENTS_NAMESPACE = "default"
WEBHOOK_NAMESPACE = "gpushare-soak"
WEBHOOK_CONFIGURATION = "gpushare-soak"
PEERING = "gpushare-soak"
#: --nvidia-config-retention in the soak: short, so that the end checks the keys left behind
RETENTION_S = 10
#: how long after the last fault every pool must be Ready
READY_WITHIN_S = 120.0
#: the end's RSS of the operator and the webhook against their first settled value
RSS_FACTOR = 1.5
#: one step every MEAN_GAP_S seconds on average, beside one of each kind
MEAN_GAP_S = 4.0
#: the replicas' peering priorities: replica-0 leads whenever it runs (its gauges are the live ones)
PRIORITIES = (200, 100)
#: how long the end waits for the leading replica's gauges to say what the pools' status says: a
#: replica started again pauses until its killed self's peering record expires (Kopf: the same
#: priority, 60 s), then reconciles every pool
AGREE_WITHIN_S = 90.0
#: seconds from a node write of the operator's to the Event of its pass that names it
TELL_WITHIN_S = 30.0
#: how long a refused edit or GPU pod is tried again
RETRY_S = 30.0
#: a pod bound this soon before the operator's mode write is Wait's documented race, not a breach
RACE_S = 2.0

#: The soak's pools: three ACK pools (np-cgpu's, np-gpu-core's and np-evict's nodes), one NVIDIA pool
#: (np-nvidia's). np-cgpu-no-isolation's nodes stay out of every pool: their labels stay what they were.
ACK_POOLS = {"soak-a": "np-cgpu", "soak-b": "np-gpu-core", "soak-e": "np-evict"}
#: the pools pool-recreate deletes and creates again: not EVICT_POOL, whose deletion waits (its nodes
#: restored under Evict) until a long GPU Job's PodDisruptionBudget lets its last pod go, which is at
#: the soak's end, as it must
RECREATED = ("soak-a", "soak-b")
#: the pool whose rollout evicts (``modeSwitch: Evict``): GPU Jobs with PodDisruptionBudgets run
#: there; every other pool waits (``Wait``)
EVICT_POOL = "soak-e"
#: np-evict's nodes, the soak's own: two kwok nodes like np-cgpu's (a V100 each, cGPU module)
EVICT_NODE_POOL = DemoNodePool("np-evict", "gpu-evict", 2, 1, "Tesla V100-SXM2-16GB", 15, 16160, False, True)
#: the webhook's rule for a pod aimed at a pool that is half switched (its nodes in two modes): a
#: GPU Job it refuses so is submitted again each second for up to RETRY_S (not past the schedule's
#: end), as a user would
MID_SWITCH = TARGET_AMBIGUOUS.id
#: how long a "long" GPU Job's pods run (longer than any soak: the soak deletes the Job at the end)
LONG_JOB = "3600s"
#: kwok's annotation for how long a Job's pod runs before it completes (KWOK_STAGES)
COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
NVIDIA_POOL = "soak-n"
#: the pool whose admission mode the soak switches; the probe targets soak-a, always Enforce
ADMISSION_POOL = "soak-b"
PROBE_POOL = "soak-a"
#: the ACK pool GPU pods go to (its pods ask for GPU memory, right in both of its modes)
POD_POOL = "soak-a"
#: what ack-mode switches on each ACK pool: soak-a and soak-e cgpu <-> share (memoryIsolation), soak-b
#: core_mem <-> cgpu (computeAllocation; memoryIsolation stays, computeAllocation requires it)
ACK_SWITCH = {
    "soak-a": ("memoryIsolation", "cgpu", "share"),
    "soak-b": ("computeAllocation", "core_mem", "cgpu"),
    "soak-e": ("memoryIsolation", "cgpu", "share"),
}

#: lending: the lender lends its idle nodes to the borrower for a lending step's hold, then stops
LENDER, BORROWER = "soak-b", "soak-a"
LENDING = {"to": [BORROWER], "keepIdle": 0, "returnAfterSeconds": 30}
#: the rollout settings the soak's pools use: a Wait pool's (the start), an Evict pool's, and the
#: one work ``rollout`` toggles a Wait pool to and from (Cordon: a node whose mode must change
#: under GPU pods is cordoned, then uncordoned once they are gone; half the pool's nodes at once)
ROLLOUTS: tuple[Mapping[str, Any], ...] = (
    {"maxUnavailable": 1, "modeSwitch": "Wait"},
    {"maxUnavailable": 1, "modeSwitch": "Evict"},
    {"maxUnavailable": "50%", "modeSwitch": "Cordon"},
)
#: GPU memory a demand pod asks for: one of the borrower's V100s whole (15 GiB, its pods' unit);
#: one such pod more than the borrower has nodes waits for want of GPU memory: demand, which one
#: of the lender's A10 nodes (22 GiB a GPU) serves once lent
DEMAND_GIB = 15

#: the node pools a node-move moves nodes between: into an ACK pool, out of it, from one to the other
MOVE_NODEPOOLS = ("np-cgpu", "np-gpu-core", "np-cgpu-no-isolation")
#: the nodes a node-move moves are those first in these node pools: their GPUs can serve both ACK
#: pools' modes (np-cgpu-no-isolation's T4s have no cGPU kernel module: an isolating pool would
#: rightly never be Ready on them)
MOVABLE_FROM = ("np-cgpu", "np-gpu-core")

#: the real node (``--real-node``): a real kubelet beside the kwok nodes, with ACK's stand-in plugin
#: and NVIDIA's real plugin and config-manager over the project's fake NVML (2 x A100-SXM4-40GB),
#: each DaemonSet stepping aside for the other backend's pools (docs/concepts/backends.md)
REAL_NODE = "realnode-0"
#: the node pools backend-move moves the real node between: soak-a's (ACK) and the NVIDIA pool's
REAL_MOVES = (ACK_POOLS[POD_POOL], NVIDIA_NODE_POOL.nodepool_id)
#: the NVIDIA pool's configPropagationSeconds with the real node: its kubelet rewrites the plugin's
#: ConfigMap volume at its pod sync (15 s on the test bed, plus jitter), as the real-node tier's
#: pools say (kwok's simulated plugin reads the ConfigMap at once: 2 s)
REAL_PROPAGATION_S = 40
#: the GPUs of the fake NVML on the real node (ACK's stand-in is given the same ones)
REAL_GPU_MEMORY_MIB = 40 * 1024
#: how long backend-move waits for the real node's last move to be done, and config-manager-kill
#: for a config-manager to run (the node on NVIDIA's plugin)
MOVE_WAIT_S = 90.0
#: the work and faults only the real node makes possible (scheduled with ``--real-node``)
REAL_WORK = ("backend-move",)
REAL_FAULTS = ("kubelet-restart", "config-manager-kill")

WORK = (
    "ack-mode",
    "nvidia-replicas",
    "nvidia-mode",
    "admission-mode",
    "gpu-pod",
    "gpu-job",
    "probe",
    "node-move",
    "pool-recreate",
    "lending",
    "rollout",
)
FAULTS = (
    "operator-kill",
    "operator-stop",
    "webhook-kill",
    "apiserver-kill",
    "etcd-pause",
    "plugin-pod-delete",
    "watch-cut",
)
KINDS = WORK + FAULTS
#: the kinds of a soak with the real node
REAL_KINDS = KINDS + REAL_WORK + REAL_FAULTS
#: the steps tried again when refused: every kind of work but the probe (tried once: a refusal is
#: its answer) and pool-recreate (which retries its own deletion and creation)
RETRIED = tuple(kind for kind in WORK + REAL_WORK if kind not in ("probe", "pool-recreate"))

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: RequestResponse
  verbs: [create]
  namespaces: [kube-system, soak]
  resources:
  - group: ""
    resources: [pods]
- level: Request
  verbs: [create, update, patch, delete, deletecollection]
  resources:
  - group: ""
    resources: [nodes, pods, pods/eviction, pods/binding, configmaps]
  - group: gpushare.io
    resources: [gpusharepools]
  - group: policy
    resources: [poddisruptionbudgets, poddisruptionbudgets/status]
- level: None
"""
#: kwok's built-in pod stages (v0.7.0: a pod Ready once bound, deleted once marked for deletion, a
#: Job's pod complete at once), but a Job's pod completes after its COMPLETE_DELAY annotation: so a
#: GPU Job runs a while, holding its GPUs, as a real one does
KWOK_STAGES = (Path(__file__).parent / "soak-kwok-stages.yaml").read_text()
#: the first rule records the creations of the device plugin pods and the soak's pods with the
#: apiserver's response: their names (a Job's pods have generated ones), UIDs and creationTimestamps;
#: the budgets' status writes (the disruption controller's, and the apiserver's own decrement with
#: each eviction it grants) are the evidence around an eviction

INVARIANTS = (
    "owned-labels: every node's owned labels are what its pool wants, or what it had before any pool"
    " (after an ACK pool, ack.node.gpu.schedule=default where it had none); no node still lent once"
    " the lending is off",
    "operator-writes: the operator's node patches touch only the labels it owns and gpushare.io/ annotations",
    "operator-configmaps: the operator writes no ConfigMap but NVIDIA's plugin configs",
    f"evictions: no pod evicted except under Evict, within its PDB: the operator evicts only pods on the"
    f" nodes of {EVICT_POOL} (modeSwitch Evict) that ask for its GPUs, and only through pods/eviction, so"
    " the apiserver holds each to its PodDisruptionBudget (429 counted); it deletes no workload pod itself,"
    " and evicts nothing from a Wait pool",
    f"wait-guard: no node's mode changed while a pod using its GPUs was bound there (the soak's GPU pods"
    f" run in pools with modeSwitch Wait or Cordon; a pod bound under {RACE_S:.0f}s before the write is"
    " the documented race, counted apart)",
    "plugin-restarts: each change of a node's ACK plugin labels by the operator owes one deletion, by the"
    " operator, of that node's ACK plugin pods created before the restart's since, before the node's next"
    " change (what is left then is owed to that one): none doubled (no pod created at or after since"
    " deleted, no second pod, none where nothing was owed), none missed (every such change records a"
    " Pending restart, and no old pod outlives the node's last change); old pods the soak's own"
    " plugin-pod-delete deleted first, and nodes with no plugin pod, owe the operator nothing",
    "no-cordon: no node left cordoned or tainted by the operator",
    f"pools-ready: every pool Ready within {READY_WITHIN_S:.0f}s of the last fault",
    "nvidia-keys: after the keys' grace, NVIDIA's ConfigMap holds only keys a pool or node needs, "
    "and every key a node names exists",
    f"rss: the operator's and the webhook's RSS at the end within {RSS_FACTOR}x of their first settled value",
    f"metrics-agree: within {AGREE_WITHIN_S:.0f}s of the end's settling, the leading replica's gauges say"
    " what each pool's status says (each condition, the matched nodes, the mode)",
    f"events-agree: each change of a node's labels by the operator is named by a write Event of a pool"
    f" (LabelsApplied, LabelsRestored, DriftCorrected) within {TELL_WITHIN_S:.0f}s, unless its posting"
    " failed (logged) or its replica was killed first (counted apart); no such Event names a node the"
    " operator did not write",
    "webhook-errors: the webhook never answers an error itself",
    "probe: a pod asking for 33 % of a GPU's cores is never admitted",
)


@dataclass(frozen=True, order=True)
class Step:
    """One thing the soak does at ``at`` seconds: ``target`` names what (a replica, a pool, a
    value); ``hold`` is how long a fault lasts or a pod lives."""

    at: float
    kind: str
    target: str = ""
    hold: float = 0.0

    def __str__(self) -> str:
        hold = f" for {self.hold:.1f}s" if self.hold else ""
        target = f" {self.target}" if self.target else ""
        return f"{self.at:7.2f}s  {self.kind}{target}{hold}"


def _step(rng: random.Random, kind: str, at: float) -> Step:
    at = round(at, 2)
    if kind in ("operator-kill", "operator-stop"):
        hold = rng.uniform(1, 6) if kind == "operator-kill" else rng.uniform(2, 12)
        return Step(at, kind, f"replica-{rng.randrange(2)}", round(hold, 1))
    if kind in ("webhook-kill", "apiserver-kill", "etcd-pause"):
        return Step(at, kind, "", round(rng.uniform(1, 5), 1))
    if kind == "plugin-pod-delete":
        return Step(at, kind, rng.choice(("ack", "nvidia")))
    if kind == "ack-mode":
        return Step(at, kind, rng.choice(sorted(ACK_POOLS)))
    if kind == "nvidia-replicas":
        return Step(at, kind, str(rng.randint(2, 4)))
    if kind == "gpu-job":
        return Step(at, kind, rng.choice(("short", "long")), round(rng.uniform(3, 20), 1))
    if kind == "gpu-pod":
        return Step(at, kind, rng.choice((POD_POOL, NVIDIA_POOL)), round(rng.uniform(3, 20), 1))
    if kind == "node-move":
        src, dst = rng.sample(MOVE_NODEPOOLS, 2)
        return Step(at, kind, f"{src}->{dst}")
    if kind == "pool-recreate":
        return Step(at, kind, rng.choice(RECREATED), round(rng.uniform(2, 10), 1))
    if kind == "lending":
        return Step(at, kind, f"{LENDER}->{BORROWER}", round(rng.uniform(20, 60), 1))
    if kind == "rollout":
        return Step(at, kind, POD_POOL)
    if kind == "kubelet-restart":
        return Step(at, kind, REAL_NODE, round(rng.uniform(1, 8), 1))
    if kind in ("backend-move", "config-manager-kill"):
        return Step(at, kind, REAL_NODE)
    return Step(at, kind)  # nvidia-mode, admission-mode: a toggle; probe; watch-cut


#: the targets each run covers in its first 80 % (beside one step of every other kind): each ACK
#: pool's mode switched there and back, a short and a long GPU Job
COVER: dict[str, tuple[str, ...]] = {
    "ack-mode": tuple(p for p in sorted(ACK_POOLS) for _ in range(2)),
    "gpu-job": ("short", "long"),
}


def make_schedule(seed: int, seconds: float, *, real: bool = False) -> list[Step]:
    """The soak's steps over ``seconds``: every kind once in the first 80 % (COVER's kinds once per
    target), then one every MEAN_GAP_S seconds on average; ``real``: the real node's kinds too.
    Deterministic: the same seed, length and nodes, the same steps."""
    kinds = REAL_KINDS if real else KINDS
    rng = random.Random(seed)
    steps = []
    for kind in kinds:
        for target in COVER.get(kind, ("",)):
            step = _step(rng, kind, rng.uniform(0, seconds * 0.8))
            steps.append(replace(step, target=target) if target else step)
    at = 0.0
    while True:
        at += rng.expovariate(1 / MEAN_GAP_S)
        step = _step(rng, rng.choice(kinds), at)
        if step.at >= seconds:  # after rounding to 1/100 s: 1383.0996 of 1383.0996... is 1383.1
            break
        steps.append(step)
    return sorted(steps)


def format_schedule(seed: int, steps: list[Step]) -> str:
    return "\n".join([f"schedule (seed {seed}, {len(steps)} steps):", *(f"  {s}" for s in steps)])


@dataclass
class Violation:
    invariant: str
    what: str
    evidence: list[str] = field(default_factory=list)


@dataclass
class Report:
    seed: int
    seconds: float
    #: with the real node (its work and faults in the report)
    real: bool = False
    done: Counter[str] = field(default_factory=Counter)
    #: work steps the cluster refused (apiserver down, etcd paused, webhook down under Fail)
    refused: Counter[str] = field(default_factory=Counter)
    #: work steps the apiserver answered with a 4xx of its own (the CRD's rules, the webhook)
    denied: Counter[str] = field(default_factory=Counter)
    #: the edits by direction (a mode switch one way and back)
    detail: Counter[str] = field(default_factory=Counter)
    #: what each invariant was checked against (nodes, audit records, samples)
    checked: dict[str, int] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def violate(self, invariant: str, what: str, evidence: list[str] | None = None) -> None:
        self.violations.append(Violation(invariant, what, evidence or []))

    def text(self) -> str:
        lines = [f"soak report: seed {self.seed}, {self.seconds / 60:.2f} minutes of schedule"]
        work, faults = (WORK + REAL_WORK, FAULTS + REAL_FAULTS) if self.real else (WORK, FAULTS)
        for title, kinds in (("work", work), ("faults", faults)):
            parts = []
            for k in kinds:
                why = [f"{n} {w}" for n, w in ((self.refused[k], "refused"), (self.denied[k], "denied")) if n]
                parts.append(f"{k} {self.done[k]}" + (f" ({', '.join(why)})" if why else ""))
            lines.append(f"  {title}: {', '.join(parts)}")
        if self.detail:
            lines.append(f"  edits: {', '.join(f'{k} {n}' for k, n in sorted(self.detail.items()))}")
        lines.append("  invariants checked:")
        for inv in INVARIANTS:
            name = inv.split(":", 1)[0]
            lines.append(f"    {name} ({self.checked.get(name, 0)} checked)")
        lines.extend(f"  note: {n}" for n in self.notes)
        if not self.violations:
            lines.append("  violations: none")
        for v in self.violations:
            lines.append(f"  VIOLATION {v.invariant}: {v.what}")
            lines.extend(f"      {e}" for e in v.evidence[:20])
        if self.violations:
            lines.append(f"FAILED: {len(self.violations)} violation(s), seed {self.seed}")
        else:
            lines.append(f"PASSED: seed {self.seed}")
        return "\n".join(lines)


# -- processes -------------------------------------------------------------------------------------


class Child:
    """``gpushare run`` or ``gpushare webhook`` in its own session; restarted with the same argv."""

    def __init__(self, name: str, argv: list[str], log: Path, metrics_port: int) -> None:
        self.name, self.argv, self.log, self.metrics_port = name, argv, log, metrics_port
        self.proc: subprocess.Popen[bytes] | None = None
        self.lock = asyncio.Lock()
        self.starts = 0

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.starts += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)
            if sig == signal.SIGKILL:
                self.proc.wait(10)

    def stop(self) -> None:
        if self.alive():
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def rss_kib(self) -> int | None:
        if not self.alive():
            return None
        assert self.proc is not None
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            return None
        return None

    def metrics_text(self) -> str | None:
        """This process's /metrics; None when it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as resp:
                return str(resp.read().decode())
        except OSError:
            return None

    def metric(self, name: str, **labels: str) -> float | None:
        """The sum of this process's samples ``name`` with ``labels`` (0 where it has none); None when
        it does not answer."""
        text = self.metrics_text()
        return None if text is None else metric_sum(text, name, **labels) or 0.0


def _gpushare(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpushare", *args]


#: ``python -c`` code that runs ``gpushare`` (its arguments after it) with the webhook's rules made to
#: raise: the ``--break webhook-errors`` webhook, a bug in the process only
BROKEN_RULES = """\
import runpy, sys
import gpushare.webhook.answer as answer
def broken(*args, **kwargs):
    raise RuntimeError("the soak's break webhook-errors: the rules raise")
answer.evaluate = broken
sys.argv[0] = "gpushare"
runpy.run_module("gpushare", run_name="__main__")
"""


# -- the soak --------------------------------------------------------------------------------------

#: what a refused call raises: the apiserver down or paused, the webhook down under Fail
MERGE_PATCH: dict[str, Any] = {"_content_type": "application/merge-patch+json"}
REFUSED = (ApiException, aiohttp.ClientError, OSError, asyncio.TimeoutError)
T = 10  # seconds: every call of the soak's own (a paused etcd holds requests)


#: the rss break's requests held open at the webhook (its limit is 256 connections)
HELD_BODIES = 80

#: Deliberate breaks (``--break NAME``), made once the schedule is over: each must fail its invariant,
#: showing the check can fail.
BREAKS = {
    "owned-labels": "label a node of no pool cgpu=true (a label left behind)",
    "operator-writes": "write the label team=soak on a node as the operator's user",
    "evictions": f"evict a GPU pod of {POD_POOL} (modeSwitch Wait) as the operator's user",
    "wait-guard": "switch a node's ACK mode as the operator's user while a GPU pod is bound there",
    "plugin-restarts": "delete a node's current ACK plugin pod once more as the operator's user (a duplicate"
    " restart)",
    "no-cordon": f"annotate a node {c.ANNOTATION_CORDONED_BY} (a cordon left behind)",
    "nvidia-keys": "add a key no pool or node needs to NVIDIA's ConfigMap",
    "pools-ready": "create a pool that selects no node",
    "probe": "delete the webhook's configuration, then probe once more",
    "operator-configmaps": f"create a ConfigMap in namespace {NAMESPACE} as the operator's user",
    "metrics-agree": "pause both replicas (a Kopf peer of a higher priority in the peering object): the"
    " leader stops exporting the pools' gauges, as a standby does, while their status stays (the peer"
    " removed after the check)",
    "events-agree": "delete every Event about the pools (Events lost: the operator's writes untold)",
    "webhook-errors": "start the webhook again with its rules made to raise (a bug: its evaluation"
    " replaced by one that raises, in the process only), then probe once more: it answers that request"
    " with an error of its own",
    "rss": f"while the end's RSS is read, hold {HELD_BODIES} requests to the webhook, each with all but one"
    " byte of the largest AdmissionReview body it accepts sent (its documented limits allow it): the"
    " webhook really holds them in memory, so its RSS really grows past the factor (the first settled"
    " value, the factor and the reading are left as they are)",
}
OUT_OF_POOLS = "np-cgpu-no-isolation"
#: the peer ``--break metrics-agree`` adds to the peering object
BREAK_PEER = "soak-break"


class Soak:
    def __init__(
        self,
        seed: int,
        seconds: float,
        workdir: Path,
        *,
        out: Callable[[str], None] = print,
        breaks: tuple[str, ...] = (),
        real_node: bool = False,
    ) -> None:
        self.seed, self.seconds, self.dir, self.out = seed, seconds, workdir, out
        self.breaks = breaks
        #: with the real node (REAL_NODE): its backend moves, kubelet restarts, config-manager kills
        self.real_node = real_node
        self.steps = make_schedule(seed, seconds, real=real_node)
        self.report = Report(seed, seconds, real=real_node)
        #: pools a pool-recreate deleted, each with the Event set once it is created again
        self.recreating: dict[str, asyncio.Event] = {}
        self.dev: DevCluster | None = None
        self.info: ClusterInfo | None = None
        self.api: client.ApiClient | None = None
        self.replicas: list[Child] = []
        self.webhook: Child | None = None
        #: the relay between the operator's replicas and the webhook and the kube-apiserver (``watch-cut``)
        self.proxy: CutProxy | None = None
        self.comp_locks = {"kube-apiserver": asyncio.Lock(), "etcd": asyncio.Lock()}
        self.pods: set[str] = set()
        #: when the schedule ends (monotonic): a refused GPU Job is not submitted again past it
        self.schedule_end = float("inf")
        #: the GPU Jobs (each with its PodDisruptionBudget of the same name) not deleted yet
        self.jobs: set[str] = set()
        #: each GPU pod the soak created (namespace/name) and what it asks for
        self.holds: dict[str, dict[str, int]] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.last_fault_end = 0.0
        self.before: dict[str, dict[str, str]] = {}
        #: each node's node pool when the soak started
        self.home: dict[str, str] = {}
        self.initial_keys: set[str] = set()
        self.rss_first: dict[str, int] = {}
        #: when the soak SIGKILLed an operator replica (events-agree: an Event it could not post)
        self.kills: list[datetime] = []
        self.webhook_errors = 0.0
        #: (node, key) pairs already reported missing
        self.missing_seen: set[tuple[str, str]] = set()
        self.samples = 0
        self.nvidia_on = True
        self.ack_on = dict.fromkeys(ACK_POOLS, True)
        self.admission = "Enforce"
        #: each ACK pool's rollout settings as the soak's rollout edits left them
        self.rollouts = {name: ROLLOUTS[1] if name == EVICT_POOL else ROLLOUTS[0] for name in ACK_POOLS}
        #: one edit of a pool's spec at a time: each reads what the last one left (ack_on, ...)
        self.editing: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        #: whether the lender lends (a lending step's hold)
        self.lending = False
        #: each lending step's demand pods
        self.lent: dict[Step, list[str]] = {}
        #: one kubelet-restart of the real node at a time
        self.kubelet_lock = asyncio.Lock()

    # -- start ------------------------------------------------------------------------------------
    async def _setup(self) -> None:
        assert self.info is not None and self.api is not None
        api = self.api
        await install_crd_files(api, list(CRDS))
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        real = None
        if self.real_node:
            real = RealNodePlugin(
                self.info.ports["kube-apiserver"], gpus=nv.DEFAULT_GPUS, gpu_memory_mib=REAL_GPU_MEMORY_MIB
            )
        await ensure_device_plugin_daemonset(api, real_nodes=real)
        if self.real_node:
            assert self.dev is not None
            await nv.install(api, self.dev, NVIDIA_CONFIGS)  # NVIDIA's real DaemonSet serves kwok's too
            # ACK's plugin only, in soak-a's node pool; NVIDIA's selector once soak-a has the node
            labels = {**PLUGIN_NODE_SELECTOR, POOL_LABEL: REAL_MOVES[0]}
            await core.patch_node(REAL_NODE, {"metadata": {"labels": labels}})
        await create_demo_nodes(str(self.info.kubeconfig), (*DEMO_POOLS, EVICT_NODE_POOL))
        await create_nvidia_nodes(api, stand_in=not self.real_node)
        for ns in (NAMESPACE, WEBHOOK_NAMESPACE):
            await core.create_namespace(cast(Any, {"metadata": {"name": ns}}))
        await custom.create_cluster_custom_object(
            "kopf.dev",
            "v1",
            "clusterkopfpeerings",
            {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": PEERING}},
        )
        for node in (await core.list_node()).items:
            labels = node.metadata.labels or {}
            self.before[node.metadata.name] = {k: labels[k] for k in c.MANAGED_LABELS if k in labels}
            self.home[node.metadata.name] = labels.get(POOL_LABEL, "")
        cm = await core.read_namespaced_config_map(nv.CONFIGS_CONFIGMAP, nv.NAMESPACE)
        self.initial_keys = set((cm.data or {}).keys())
        for name in ACK_POOLS:
            await custom.create_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, self._ack_pool(name))
        await custom.create_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, self._nvidia_pool())

    def _ack_pool(self, name: str) -> dict[str, Any]:
        """ACK pool ``name`` as the soak's edits left it (its mode, and its admission mode)."""
        spec: dict[str, Any] = {
            "nodeSelector": {"matchLabels": {POOL_LABEL: ACK_POOLS[name]}},
            "memoryIsolation": True,
            "computeAllocation": False,
            "rollout": dict(self.rollouts[name]),
        }
        spec[ACK_SWITCH[name][0]] = self.ack_on[name]
        if name == ADMISSION_POOL:
            spec["admission"] = {"mode": self.admission}
        if name == LENDER and self.lending:
            spec["lending"] = LENDING
        return {"apiVersion": c.API_VERSION, "kind": c.KIND, "metadata": {"name": name}, "spec": spec}

    def _nvidia_pool(self) -> dict[str, Any]:
        return {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "metadata": {"name": NVIDIA_POOL},
            "spec": {
                "nodeSelector": {"matchLabels": {POOL_LABEL: NVIDIA_NODE_POOL.nodepool_id}},
                "nvidia": {
                    "strategy": "TimeSlicing",
                    "replicas": 2,
                    "configPropagationSeconds": REAL_PROPAGATION_S if self.real_node else 2,
                },
                "rollout": {"maxUnavailable": 1, "modeSwitch": "Wait"},
            },
        }

    def _start_processes(self) -> None:
        assert self.info is not None
        self.proxy = CutProxy("127.0.0.1", self.info.ports["kube-apiserver"])
        self.proxy.start()
        op_kc = str(self._via_proxy(self.info.dir / f"kubeconfig-{OPERATOR_USER}"))
        for i in range(2):
            port = free_port()
            argv = _gpushare(
                "run", "--kubeconfig", op_kc, "--metrics-port", str(port), "--log-format", "json",
                "--peering", PEERING, "--nvidia-config-retention", str(RETENTION_S),
                "--priority", str(PRIORITIES[i]),
            )  # fmt: skip
            self.replicas.append(Child(f"replica-{i}", argv, self.dir / f"operator-{i}.log", port))
        port = free_port()
        argv = _gpushare(
            "webhook", "--kubeconfig", str(self._via_proxy(self.info.dir / f"kubeconfig-{WEBHOOK_USER}")),
            "--metrics-port", str(port), "--log-format", "json", "--webhook-local",
            "--webhook-port", str(free_port()), "--webhook-namespace", WEBHOOK_NAMESPACE,
            "--webhook-configuration", WEBHOOK_CONFIGURATION, "--webhook-cert-dir", str(self.dir / "certs"),
            "--webhook-failure-policy", "Fail",
        )  # fmt: skip
        self.webhook = Child("webhook", argv, self.dir / "webhook.log", port)
        for child in (*self.replicas, self.webhook):
            child.start()

    def _via_proxy(self, kubeconfig: Path) -> Path:
        """A copy of ``kubeconfig`` whose server is the cut proxy in front of the kube-apiserver
        (the same address, 127.0.0.1, which its certificate names: TLS passes through the proxy
        untouched)."""
        assert self.proxy is not None
        doc = yaml.safe_load(kubeconfig.read_text())
        for cluster in doc["clusters"]:
            cluster["cluster"]["server"] = self.proxy.server
        out = self.dir / f"{kubeconfig.name}-via-proxy"
        out.write_text(yaml.safe_dump(doc, sort_keys=False))
        out.chmod(0o600)
        return out

    async def _pools(self) -> list[dict[str, Any]]:
        assert self.api is not None
        got = await client.CustomObjectsApi(self.api).list_cluster_custom_object(
            c.GROUP, c.VERSION, c.PLURAL, _request_timeout=T
        )
        return cast(list[dict[str, Any]], got["items"])

    async def _not_ready(self) -> dict[str, str]:
        """Each pool not Ready for its current generation, with its Ready condition's reason."""
        out = {}
        for pool in await self._pools():
            status = pool.get("status") or {}
            ready: dict[str, Any] = next(
                (x for x in status.get("conditions") or [] if x.get("type") == "Ready"), {}
            )
            current = status.get("observedGeneration") == pool["metadata"].get("generation")
            if ready.get("status") != "True" or not current:
                out[pool["metadata"]["name"]] = (
                    f"{ready.get('reason', 'no Ready condition')}: {ready.get('message', '')}"
                )
        return out

    async def _settled(self, timeout_s: float, what: str) -> dict[str, str]:
        """Wait until every pool is Ready; what is still not Ready after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        last: dict[str, str] = {"*": "never read"}
        while time.monotonic() < deadline:
            with contextlib.suppress(*REFUSED):
                last = await self._not_ready()
                if not last:
                    return {}
            await asyncio.sleep(1)
        self.out(f"soak: {what}: pools not Ready after {timeout_s:.0f}s: {last}")
        return last

    # -- steps ------------------------------------------------------------------------------------
    async def _do(self, step: Step) -> None:
        """Run one step. A refused edit or GPU pod (the apiserver down, etcd paused, the webhook
        down under Fail) is counted and tried again each second for up to RETRY_S, so the work
        happens; a fault step and the probe are tried once. An edit of a pool a pool-recreate
        deleted waits until the pool is back (as its admin would), then has RETRY_S again: deleting
        a pool whose nodes are held can take minutes, and an edit given up would leave the soak's
        switches untried."""
        fn = getattr(self, "_" + step.kind.replace("-", "_"))
        deadline = time.monotonic() + (RETRY_S if step.kind in RETRIED else 0)
        self.report.done[step.kind] += 1
        while True:
            try:
                await fn(step)
                return
            except ApiException as exc:
                if exc.status is not None and 400 <= exc.status < 500 and exc.status not in (409, 429):
                    # a real answer (the CRD's rules, the webhook): not a fault's refusal
                    self.report.denied[step.kind] += 1
                    if not (step.kind == "gpu-job" and MID_SWITCH in (exc.body or "")):
                        self.report.notes.append(f"{step.kind} at {step.at:.2f}s denied: {_short(exc)}")
                        return
                    # refused while its pool is half switched, as documented: submitted again
                    if time.monotonic() >= min(deadline, self.schedule_end):
                        self.report.notes.append(
                            f"{step.kind} at {step.at:.2f}s denied until given up: {_short(exc)}"
                        )
                        return
                    await asyncio.sleep(1)
                    continue
                self.report.refused[step.kind] += 1
                self.out(f"soak: {step.kind} at {step.at:.2f}s refused: {_short(exc)}")
            except PoolAway as exc:
                self.report.refused[step.kind] += 1
                self.out(f"soak: {step.kind} at {step.at:.2f}s waits: {exc}")
                back = self.recreating.get(exc.pool)
                if back is not None:
                    await back.wait()
                deadline = time.monotonic() + RETRY_S
                continue
            except REFUSED as exc:
                self.report.refused[step.kind] += 1
                self.out(f"soak: {step.kind} at {step.at:.2f}s refused: {_short(exc)}")
            if time.monotonic() >= deadline:
                if step.kind in RETRIED:
                    self.report.notes.append(f"{step.kind} at {step.at:.2f}s: refused until it was given up")
                return
            await asyncio.sleep(1)

    async def _patch_pool(self, name: str, spec: dict[str, Any]) -> None:
        assert self.api is not None
        if name in self.recreating:
            raise PoolAway(name)
        await client.CustomObjectsApi(self.api).patch_cluster_custom_object(
            c.GROUP,
            c.VERSION,
            c.PLURAL,
            name,
            {"spec": spec},
            _request_timeout=T,
            **MERGE_PATCH,
        )

    async def _ack_mode(self, step: Step) -> None:
        field_, on, off = ACK_SWITCH[step.target]
        async with self.editing[step.target]:  # two edits that waited for the same pool: one way each
            want = not self.ack_on[step.target]
            await self._patch_pool(step.target, {field_: want})
            self.ack_on[step.target] = want
        self.report.detail[f"ack-mode {f'{off}->{on}' if want else f'{on}->{off}'}"] += 1

    async def _nvidia_replicas(self, step: Step) -> None:
        async with self.editing[NVIDIA_POOL]:
            await self._patch_pool(
                NVIDIA_POOL, {"nvidia": {"strategy": "TimeSlicing", "replicas": int(step.target)}}
            )
            was = "TimeSlicing" if self.nvidia_on else "None"
            self.nvidia_on = True
        self.report.detail[f"nvidia-replicas {was}->TimeSlicing x{step.target}"] += 1

    async def _nvidia_mode(self, step: Step) -> None:
        async with self.editing[NVIDIA_POOL]:
            was = self.nvidia_on
            nvidia = (
                {"strategy": "None", "replicas": 1} if was else {"strategy": "TimeSlicing", "replicas": 2}
            )
            await self._patch_pool(NVIDIA_POOL, {"nvidia": nvidia})
            self.nvidia_on = not was
        self.report.detail[f"nvidia-mode {'TimeSlicing->None' if was else 'None->TimeSlicing'}"] += 1

    async def _admission_mode(self, step: Step) -> None:
        async with self.editing[ADMISSION_POOL]:
            was = self.admission
            want = "Warn" if was == "Enforce" else "Enforce"
            await self._patch_pool(ADMISSION_POOL, {"admission": {"mode": want}})
            self.admission = want
        self.report.detail[f"admission-mode {was}->{want}"] += 1

    async def _rollout(self, step: Step) -> None:
        """The rollout settings of ``step.target`` (a Wait pool whose nodes run GPU pods) toggled
        between ROLLOUTS[0] and ROLLOUTS[2]: Cordon cordons a node whose mode must change under
        pods, waits, then uncordons it."""
        async with self.editing[step.target]:
            was = self.rollouts[step.target]
            want = ROLLOUTS[2] if was == ROLLOUTS[0] else ROLLOUTS[0]
            await self._patch_pool(step.target, {"rollout": dict(want)})
            self.rollouts[step.target] = want
        self.report.detail[f"rollout {_rollout_text(was)}->{_rollout_text(want)}"] += 1

    async def _node_move(self, step: Step) -> None:
        """Relabel one node of the source node pool into the destination's: into a pool, out of
        every pool, or from one pool to the other. Only nodes first in MOVABLE_FROM move; a node
        pool keeps at least one node."""
        assert self.api is not None
        src, dst = step.target.split("->")
        core = client.CoreV1Api(self.api)
        nodes = sorted(
            n.metadata.name for n in await self._nodes() if (n.metadata.labels or {}).get(POOL_LABEL) == src
        )
        nodes = [n for n in nodes if n != REAL_NODE]  # the real node moves by backend-move only
        movable = [n for n in nodes if self.home.get(n) in MOVABLE_FROM]
        if len(nodes) < 2 or not movable:
            self.report.notes.append(
                f"node-move at {step.at:.2f}s: {src} has {len(nodes)} node(s), {len(movable)} movable: kept"
            )
            return
        node = movable[int(step.at * 100) % len(movable)]
        patch = {"metadata": {"labels": {POOL_LABEL: dst}}}
        await core.patch_node(node, cast(Any, patch), _request_timeout=T)
        self.report.detail[f"node-move {src}->{dst}"] += 1

    async def _pool_recreate(self, step: Step) -> None:
        """Delete an ACK pool (its nodes restored), then create it again ``hold`` seconds after it
        is gone, as the soak's edits left it."""
        self._spawn(self._recreate(step.target, step.hold))

    async def _recreate(self, name: str, hold: float) -> None:
        assert self.api is not None
        back = self.recreating[name] = asyncio.Event()
        try:
            await self._delete_create(name, hold)
        finally:
            if self.recreating.get(name) is back:
                del self.recreating[name]
            back.set()

    async def _delete_create(self, name: str, hold: float) -> None:
        assert self.api is not None
        custom = client.CustomObjectsApi(self.api)
        deadline = time.monotonic() + 4 * RETRY_S
        while time.monotonic() < deadline:  # deleted, then gone (the operator restored its nodes)
            try:
                await custom.get_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, name, _request_timeout=T)
                await custom.delete_cluster_custom_object(
                    c.GROUP, c.VERSION, c.PLURAL, name, _request_timeout=T
                )
            except ApiException as exc:
                if exc.status == 404:
                    break
            except REFUSED:
                pass
            await asyncio.sleep(1)
        else:
            self.report.notes.append(f"pool-recreate {name}: not gone within {4 * RETRY_S:.0f}s")
        await asyncio.sleep(hold)
        deadline = time.monotonic() + 4 * RETRY_S
        while True:  # created again: the soak's pools are all there at the end
            try:
                body = self._ack_pool(name)
                await custom.create_cluster_custom_object(
                    c.GROUP, c.VERSION, c.PLURAL, body, _request_timeout=T
                )
                break
            except ApiException as exc:
                if (
                    exc.status == 409
                    and "already exists" in (exc.body or "")
                    and not await self._deleting(name)
                ):
                    break  # an earlier try was stored after all (not the old pool, still deleting)
                self.report.refused["pool-recreate"] += 1
            except REFUSED:
                self.report.refused["pool-recreate"] += 1
            if time.monotonic() >= deadline:
                self.report.violate("pools-ready", f"GPUSharePool/{name} could not be created again")
                return
            await asyncio.sleep(1)
        self.report.detail[f"pool-recreate {name}"] += 1

    async def _deleting(self, name: str) -> bool:
        """Whether pool ``name`` is still being deleted (its deletionTimestamp set)."""
        assert self.api is not None
        with contextlib.suppress(*REFUSED):
            pool = await client.CustomObjectsApi(self.api).get_cluster_custom_object(
                c.GROUP, c.VERSION, c.PLURAL, name, _request_timeout=T
            )
            return bool(cast(dict[str, Any], pool).get("metadata", {}).get("deletionTimestamp"))
        return True

    async def _gpu_pod(self, step: Step) -> None:
        nvidia = step.target == NVIDIA_POOL
        limits = {c.RES_NVIDIA_GPU: "1"} if nvidia else {c.RES_GPU_MEM: "1"}
        name = f"work-{step.at:07.2f}".replace(".", "-")
        await self._create_pod(name, step.target, limits)
        self._spawn(self._finish_pod(name, step.hold))

    async def _create_pod(self, name: str, pool: str, limits: dict[str, str]) -> None:
        assert self.api is not None
        self.holds[f"{NAMESPACE}/{name}"] = {k: int(v) for k, v in limits.items()}
        body = _pod(name, pool, limits)
        try:
            await client.CoreV1Api(self.api).create_namespaced_pod(
                NAMESPACE, cast(Any, body), _request_timeout=T
            )
        except ApiException as exc:
            if exc.status != 409:  # 409: an earlier try was stored after all
                raise
        self.pods.add(name)

    async def _lending(self, step: Step) -> None:
        """The lender lends to the borrower, and the borrower gets one whole-GPU pod more than it
        has nodes (the last waits: demand); after ``hold`` the pods finish and lending stops (the
        lent nodes go back at once)."""
        await self._patch_pool(LENDER, {"lending": LENDING})
        self.lending = True
        if step not in self.lent:  # once per step, however often it is tried again
            self.lent[step] = [
                f"demand-{step.at:07.2f}-{i}".replace(".", "-")
                for i in range(1 + sum(1 for n in await self._nodes() if self._in_borrower(n)))
            ]
            self._spawn(self._lending_off(self.lent[step], step.hold))  # whatever happens next
        for name in self.lent[step]:
            await self._create_pod(name, BORROWER, {c.RES_GPU_MEM: str(DEMAND_GIB)})
        self.report.detail[f"lending on, {len(self.lent[step])} whole-GPU pods"] += 1

    @staticmethod
    def _in_borrower(node: Any) -> bool:
        return bool((node.metadata.labels or {}).get(POOL_LABEL) == ACK_POOLS[BORROWER])

    async def _lending_off(self, pods: list[str], after: float) -> None:
        await asyncio.sleep(after)
        for name in pods:
            await self._delete_pod(name)
        self.lending = False  # first: a pool-recreate from now on creates the lender without it
        deadline = time.monotonic() + 4 * RETRY_S
        while True:
            try:
                await self._patch_pool(LENDER, {"lending": None})
                break
            except ApiException as exc:
                if exc.status == 404:
                    break  # deleted by a pool-recreate: created again without lending
                self.report.refused["lending"] += 1
            except PoolAway:
                break
            except REFUSED:
                self.report.refused["lending"] += 1
            if time.monotonic() >= deadline:
                self.report.notes.append("lending: could not be turned off; the end's checks will say")
                return
            await asyncio.sleep(1)
        self.report.detail["lending off"] += 1

    async def _gpu_job(self, step: Step) -> None:
        """A GPU Job of two pods on EVICT_POOL with a PodDisruptionBudget (minAvailable 1: one of
        its pods may be evicted at a time): "short" ones run ``hold`` seconds (kwok completes them,
        KWOK_STAGES), "long" ones longer than the soak (deleted at its end)."""
        assert self.api is not None
        name = f"job-{step.at:07.2f}".replace(".", "-")
        labels = {"gpushare.io/soak": "true", "soak-job": name}
        pdb = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"soak-job": name}}},
        }
        pod = {
            "metadata": {
                "labels": labels,
                "annotations": {COMPLETE_DELAY: LONG_JOB if step.target == "long" else f"{step.hold}s"},
            },
            "spec": _pod(name, EVICT_POOL, {c.RES_GPU_MEM: "1"})["spec"],
        }
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"gpushare.io/soak": "true"}},
            "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 100, "template": pod},
        }
        for create in (
            lambda: client.PolicyV1Api(self.api).create_namespaced_pod_disruption_budget(
                NAMESPACE, cast(Any, pdb), _request_timeout=T
            ),
            lambda: client.BatchV1Api(self.api).create_namespaced_job(
                NAMESPACE, cast(Any, job), _request_timeout=T
            ),
        ):
            try:
                await create()
            except ApiException as exc:
                if exc.status != 409:  # 409: an earlier try was stored after all
                    raise
            self.jobs.add(name)
        self.report.detail[f"gpu-job {step.target}"] += 1

    async def _delete_job(self, name: str) -> None:
        """A Job (its pods by the garbage collector) and its PodDisruptionBudget deleted."""
        assert self.api is not None
        batch, policy = client.BatchV1Api(self.api), client.PolicyV1Api(self.api)
        deletes: tuple[Callable[[], Awaitable[Any]], ...] = (
            lambda: batch.delete_namespaced_job(
                name, NAMESPACE, propagation_policy="Background", _request_timeout=T
            ),
            lambda: policy.delete_namespaced_pod_disruption_budget(name, NAMESPACE, _request_timeout=T),
        )
        for delete in deletes:
            await _until_deleted(delete)
        self.jobs.discard(name)

    async def _finish_pod(self, name: str, after: float) -> None:
        await asyncio.sleep(after)
        await self._delete_pod(name)

    async def _delete_pod(self, name: str) -> None:
        assert self.api is not None
        core = client.CoreV1Api(self.api)
        await _until_deleted(
            lambda: core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0, _request_timeout=T)
        )
        self.pods.discard(name)

    async def _probe(self, step: Step) -> None:
        assert self.api is not None
        name = f"probe-{step.at:07.2f}".replace(".", "-")
        body = _pod(name, PROBE_POOL, {c.RES_GPU_MEM: "2", c.RES_GPU_CORE: "33"})
        self.report.checked["probe"] = self.report.checked.get("probe", 0) + 1
        try:
            await client.CoreV1Api(self.api).create_namespaced_pod(
                NAMESPACE, cast(Any, body), _request_timeout=T
            )
        except ApiException as exc:
            if exc.status in (400, 403, 422):
                return  # denied: as it must be
            raise
        self.report.violate("probe", f"pod {NAMESPACE}/{name} asking for 33 % of a GPU's cores was admitted")
        await self._delete_pod(name)

    async def _operator_kill(self, step: Step) -> None:
        self._spawn(self._kill_restart(self.replicas[int(step.target[-1])], step.hold))

    async def _webhook_kill(self, step: Step) -> None:
        assert self.webhook is not None
        self._spawn(self._kill_restart(self.webhook, step.hold))

    async def _kill_restart(self, child: Child, hold: float) -> None:
        async with child.lock:
            if child in self.replicas:
                self.kills.append(datetime.now(UTC))
            child.signal(signal.SIGKILL)
            await asyncio.sleep(hold)
            child.start()
            self.last_fault_end = time.monotonic()

    async def _operator_stop(self, step: Step) -> None:
        self._spawn(self._stop_cont(self.replicas[int(step.target[-1])], step.hold))

    async def _stop_cont(self, child: Child, hold: float) -> None:
        async with child.lock:
            child.signal(signal.SIGSTOP)
            await asyncio.sleep(hold)
            child.signal(signal.SIGCONT)
            self.last_fault_end = time.monotonic()

    async def _watch_cut(self, step: Step) -> None:
        """Every connection between the operator's replicas or the webhook and the kube-apiserver
        cut at once, mid-stream (their watches, and any request in flight); new ones go through."""
        assert self.proxy is not None
        cut = await asyncio.to_thread(self.proxy.cut)
        self.report.detail["watch-cut connections"] += cut
        self.last_fault_end = time.monotonic()

    async def _apiserver_kill(self, step: Step) -> None:
        self._spawn(self._component("kube-apiserver", step.hold, pause=False))

    async def _etcd_pause(self, step: Step) -> None:
        self._spawn(self._component("etcd", step.hold, pause=True))

    async def _component(self, name: str, hold: float, *, pause: bool) -> None:
        assert self.dev is not None and self.info is not None
        async with self.comp_locks[name]:
            if pause:
                self.dev.pause(name)
                await asyncio.sleep(hold)
                self.dev.resume(name)
            else:
                self.dev.kill(name)
                await asyncio.sleep(hold)
                self.dev.restart(name, wait=False)
                await self._api_ready()
            self.last_fault_end = time.monotonic()

    async def _api_ready(self) -> None:
        assert self.api is not None

        async def ready() -> bool:
            with contextlib.suppress(*REFUSED):
                await client.CoreV1Api(self.api).list_namespace(limit=1, _request_timeout=2)
                return True
            return False

        await wait_for(ready, what="kube-apiserver back", timeout_s=120, interval=0.5)

    async def _plugin_pod_delete(self, step: Step) -> None:
        assert self.api is not None
        ns, labels = (
            (nv.NAMESPACE, nv.APP_LABELS)
            if step.target == "nvidia"
            else (c.DEFAULT_PLUGIN_NAMESPACE, c.DEFAULT_PLUGIN_LABELS)
        )
        core = client.CoreV1Api(self.api)
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        pods = (await core.list_namespaced_pod(ns, label_selector=selector, _request_timeout=T)).items
        if not pods:
            self.report.notes.append(f"plugin-pod-delete at {step.at:.2f}s: no {step.target} plugin pod")
            return
        pod = sorted(pods, key=lambda p: p.metadata.name)[int(step.at * 100) % len(pods)]
        await core.delete_namespaced_pod(pod.metadata.name, ns, _request_timeout=T)

    async def _backend_move(self, step: Step) -> None:
        """The real node's node pool switched between soak-a's and the NVIDIA pool's: the operator
        moves it from one backend to the other (the old backend's labels restored, the new one's
        written, in one guarded patch), and the two plugins' DaemonSets follow."""
        assert self.api is not None
        core = client.CoreV1Api(self.api)
        pool_of = {REAL_MOVES[0]: POD_POOL, REAL_MOVES[1]: NVIDIA_POOL}

        async def moved() -> Any:
            node = await core.read_node(REAL_NODE, _request_timeout=T)
            labels = node.metadata.labels or {}
            return node if labels.get(c.LABEL_POOL) == pool_of.get(labels.get(POOL_LABEL, "")) else None

        # the last move done first (held while a GPU pod runs there), for up to MOVE_WAIT_S: a node
        # moved back before it ever reached the other backend would not exercise it
        try:
            node = await wait_for(moved, what=f"{REAL_NODE}'s last move", timeout_s=MOVE_WAIT_S, interval=1)
        except TimeoutError:
            node = await core.read_node(REAL_NODE, _request_timeout=T)
        src = (node.metadata.labels or {}).get(POOL_LABEL)
        dst = REAL_MOVES[1] if src == REAL_MOVES[0] else REAL_MOVES[0]
        await core.patch_node(REAL_NODE, {"metadata": {"labels": {POOL_LABEL: dst}}}, _request_timeout=T)
        backend = {REAL_MOVES[0]: "ack", REAL_MOVES[1]: "nvidia"}
        self.report.detail[f"backend-move {backend.get(src or '', src)}->{backend[dst]}"] += 1

    async def _kubelet_restart(self, step: Step) -> None:
        self._spawn(self._kubelet_down(step.hold))

    async def _kubelet_down(self, hold: float) -> None:
        """The real node's kubelet stopped (SIGTERM: its pods keep running), and started again
        ``hold`` seconds later."""
        assert self.dev is not None and self.dev.real is not None
        real = self.dev.real
        node = real.node(REAL_NODE)
        async with self.kubelet_lock:
            if node.kubelet is not None:
                await asyncio.to_thread(node.kubelet.stop)
            await asyncio.sleep(hold)
            await asyncio.to_thread(real.start_kubelet, node)
            self.last_fault_end = time.monotonic()

    async def _config_manager_kill(self, step: Step) -> None:
        """NVIDIA's config-manager sidecar on the real node SIGKILLed (its container restarts); while
        the node is on ACK's plugin there is none: waited for up to MOVE_WAIT_S, as a pod of it
        starts only after a backend move."""
        deadline = time.monotonic() + MOVE_WAIT_S
        while True:
            pids = _processes("config-manager")
            if pids or time.monotonic() >= deadline:
                break
            await asyncio.sleep(1)
        if not pids:
            self.report.notes.append(f"config-manager-kill at {step.at:.2f}s: none ran on {REAL_NODE}")
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.report.detail["config-manager-kill processes killed"] += len(pids)
        self.last_fault_end = time.monotonic()

    async def _real_node_both_plugins(self) -> None:
        """The real node, in soak-a, labelled for NVIDIA's plugin too (as GPU Feature Discovery does
        on any GPU node): the plugin's DaemonSet steps aside for an ACK pool's node; waits until
        only ACK's plugin runs there, Ready."""
        assert self.api is not None
        api = self.api
        core = client.CoreV1Api(api)
        await core.patch_node(REAL_NODE, {"metadata": {"labels": dict(nv.NODE_SELECTOR)}})

        async def only_ack() -> bool:
            ack = [p for p in await plugin_pods_on(api, REAL_NODE) if p.metadata.deletion_timestamp is None]
            return any(pod_running_and_ready(p) for p in ack) and not await nv.plugin_pods_on(api, REAL_NODE)

        await wait_for(only_ack, what=f"only ACK's device plugin on {REAL_NODE}", timeout_s=180)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _monitor(self) -> None:
        """Every 2 s: the webhook's errors (its counter restarts with the process: the soak keeps
        the highest seen per process) and a sample count; every key a node names exists."""
        assert self.webhook is not None
        seen: dict[int, float] = {}
        while True:
            with contextlib.suppress(*REFUSED):
                await self._named_keys_exist()
            proc = self.webhook.proc
            errors = await asyncio.to_thread(
                self.webhook.metric, "gpushare_admission_requests_total", decision="error"
            )
            if proc is not None and errors is not None:
                seen[proc.pid] = max(seen.get(proc.pid, 0.0), errors)
                self.samples += 1
            self.webhook_errors = sum(seen.values())
            await asyncio.sleep(2)

    async def _missing_keys(self) -> dict[str, str]:
        """Each node whose nvidia.com/device-plugin.config names a key NVIDIA's ConfigMap lacks."""
        assert self.api is not None
        cm = await client.CoreV1Api(self.api).read_namespaced_config_map(
            nv.CONFIGS_CONFIGMAP, nv.NAMESPACE, _request_timeout=T
        )
        keys = set((cm.data or {}).keys())
        missing: dict[str, str] = {}
        for n in await self._nodes():
            value = (n.metadata.labels or {}).get(c.LABEL_NVIDIA_CONFIG)
            if value and value not in keys:
                missing[n.metadata.name] = value
        return missing

    async def _named_keys_exist(self) -> None:
        """The continuous half of ``nvidia-keys``. The ConfigMap and the nodes are two reads, so a
        key written and named between them looks missing: a node counts only when it still names
        the same missing key 3 s later."""
        self.report.checked["nvidia-keys"] = self.report.checked.get("nvidia-keys", 0) + 1
        missing = await self._missing_keys()
        if not missing:
            return
        await asyncio.sleep(3)
        again = await self._missing_keys()
        for node, key in missing.items():
            if again.get(node) == key and (node, key) not in self.missing_seen:
                self.missing_seen.add((node, key))
                self.report.violate(
                    "nvidia-keys",
                    f"node {node} names config {key!r}, absent from NVIDIA's ConfigMap for 3 s or more",
                    self._audit_about("configmaps", nv.CONFIGS_CONFIGMAP),
                )

    # -- the run ----------------------------------------------------------------------------------
    async def run(self) -> Report:
        self.out(format_schedule(self.seed, self.steps))
        self.dev = DevCluster(
            self.dir / "cluster",
            keep=True,
            audit_policy=AUDIT_POLICY,
            users=(OPERATOR_USER, WEBHOOK_USER),
            kwok_stages=KWOK_STAGES,
            real_nodes=1 if self.real_node else 0,
        )
        self.info = self.dev.start()
        try:
            self.api = await make_api_client(str(self.info.kubeconfig))
            async with self.api:
                await self._setup()
                self._start_processes()
                self.out("soak: control plane, nodes and pools up; operator x2 and webhook started")
                left = await self._settled(180, "start")
                if left:
                    self.report.violate("pools-ready", f"pools not Ready before any fault: {left}")
                    return self.report
                if self.real_node:
                    await self._real_node_both_plugins()
                await self._wait_webhook()
                self._first_rss()
                monitor = asyncio.ensure_future(self._monitor())
                await self._run_steps()
                await self._heal()
                await self._break()
                await self._check_end()
                monitor.cancel()
        finally:
            for child in (*self.replicas, *([self.webhook] if self.webhook else [])):
                child.stop()
            if self.proxy is not None:
                self.proxy.stop()
            self.dev.stop(failed=bool(self.report.violations))
        return self.report

    async def _wait_webhook(self) -> None:
        assert self.api is not None
        adm = client.AdmissionregistrationV1Api(self.api)

        async def registered() -> bool:
            with contextlib.suppress(*REFUSED):
                await adm.read_validating_webhook_configuration(WEBHOOK_CONFIGURATION, _request_timeout=T)
                return True
            return False

        await wait_for(registered, what="the webhook's configuration", timeout_s=60, interval=0.5)

    def _first_rss(self) -> None:
        assert self.webhook is not None
        for child in (*self.replicas, self.webhook):
            rss = child.rss_kib()
            if rss:
                self.rss_first[child.name] = rss

    async def _run_steps(self) -> None:
        t0 = time.monotonic()
        self.schedule_end = t0 + self.seconds
        for step in self.steps:
            delay = t0 + step.at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            self.out(f"soak: {step}")
            self._spawn(self._do(step))
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)

    async def _heal(self) -> None:
        """Every fault over (the steps' own tasks have healed them); the GPU pods finished."""
        for child in (*self.replicas, *([self.webhook] if self.webhook else [])):
            if not child.alive():
                child.start()
        for name in sorted(self.pods):
            await self._delete_pod(name)
        for name in sorted(self.jobs):
            await self._delete_job(name)
        self.last_fault_end = max(self.last_fault_end, time.monotonic())
        self.out("soak: every fault healed, every GPU pod and Job finished; settling")

    async def _break(self) -> None:
        """The deliberate breaks asked for (BREAKS)."""
        if not self.breaks:
            return
        assert self.api is not None and self.info is not None
        core = client.CoreV1Api(self.api)
        loose = sorted(
            n.metadata.name
            for n in await self._nodes()
            if (n.metadata.labels or {}).get(POOL_LABEL) == OUT_OF_POOLS
        )[0]
        as_operator = await make_api_client(str(self.info.dir / f"kubeconfig-{OPERATOR_USER}"))
        async with as_operator:
            op_core = client.CoreV1Api(as_operator)
            for name in self.breaks:
                self.out(f"soak: break {name}: {BREAKS[name]}")
                if name == "owned-labels":
                    await core.patch_node(loose, {"metadata": {"labels": {c.LABEL_CGPU: "true"}}})
                elif name == "operator-writes":
                    await op_core.patch_node(loose, {"metadata": {"labels": {"team": "soak"}}})
                elif name == "evictions":
                    await self._scheduled(core, "evicted")
                    body = {"metadata": {"name": "evicted", "namespace": NAMESPACE}}
                    await op_core.create_namespaced_pod_eviction("evicted", NAMESPACE, cast(Any, body))
                elif name == "wait-guard":
                    await self._break_wait(core, op_core)
                elif name == "plugin-restarts":
                    await self._break_restart(core, op_core)
                elif name == "no-cordon":
                    await core.patch_node(
                        loose, {"metadata": {"annotations": {c.ANNOTATION_CORDONED_BY: "soak"}}}
                    )
                elif name == "nvidia-keys":
                    await core.patch_namespaced_config_map(
                        nv.CONFIGS_CONFIGMAP, nv.NAMESPACE, {"data": {"soak-leftover": "version: v1\n"}}
                    )
                elif name == "pools-ready":
                    pool = self._ack_pool("soak-a")
                    pool["metadata"]["name"] = "soak-broken"
                    pool["spec"]["nodeSelector"] = {"matchLabels": {POOL_LABEL: "np-none"}}
                    await client.CustomObjectsApi(self.api).create_cluster_custom_object(
                        c.GROUP, c.VERSION, c.PLURAL, pool
                    )
                elif name == "probe":
                    adm = client.AdmissionregistrationV1Api(self.api)
                    await adm.delete_validating_webhook_configuration(WEBHOOK_CONFIGURATION)
                    await self._probe(Step(self.seconds, "probe"))
                elif name == "operator-configmaps":
                    body = {"metadata": {"name": "soak-stray", "namespace": NAMESPACE}, "data": {"a": "b"}}
                    await op_core.create_namespaced_config_map(NAMESPACE, cast(Any, body))
                elif name == "metrics-agree":
                    await self._break_agree()
                elif name == "webhook-errors":
                    await self._break_webhook()
                elif name == "events-agree":
                    await core.delete_collection_namespaced_event(
                        EVENTS_NAMESPACE, field_selector=f"involvedObject.kind={c.KIND}"
                    )
                # rss: at the reading (_check_rss), while the webhook's configuration is still there

    async def _break_agree(self) -> None:
        """A peer of a higher priority in the peering object pauses both replicas: the leader then
        exports no pool gauges (as a standby does), while the pools' status stays; the peer goes
        after the check."""
        assert self.api is not None
        await self._settled(READY_WITHIN_S, "break")  # the leader's gauges say the settled status
        peer = {"priority": 1000, "lifetime": 600, "lastseen": datetime.now(UTC).isoformat()}
        await client.CustomObjectsApi(self.api).patch_cluster_custom_object(
            "kopf.dev", "v1", "clusterkopfpeerings", PEERING, {"status": {BREAK_PEER: peer}}, **MERGE_PATCH
        )
        await asyncio.sleep(5)  # Kopf pauses on the peering object's event

    async def _break_webhook(self) -> None:
        """The webhook started again through BROKEN_RULES (its rules raise), then probed: its answer
        is an error of its own, which the monitor reads from its metrics."""
        assert self.webhook is not None
        async with self.webhook.lock:
            self.webhook.signal(signal.SIGKILL)
            self.webhook.argv = [sys.executable, "-c", BROKEN_RULES, *self.webhook.argv[3:]]
            self.webhook.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # probed until the new process answers
            with contextlib.suppress(*REFUSED):
                await self._probe(Step(self.seconds, "probe"))
            errors = await asyncio.to_thread(
                self.webhook.metric, "gpushare_admission_requests_total", decision="error"
            )
            if errors:
                break
            await asyncio.sleep(1)
        await asyncio.sleep(5)  # the monitor reads the webhook's counter every 2 s

    async def _break_wait(self, core: client.CoreV1Api, op_core: client.CoreV1Api) -> None:
        """A GPU pod scheduled onto a node of POD_POOL, then that node's mode switched under it as
        the operator's user, past the race window."""
        node = await self._scheduled(core, "held")
        await asyncio.sleep(RACE_S + 1)
        labels = (await core.read_node(node, _request_timeout=T)).metadata.labels or {}
        other = "cgpu" if labels.get(c.LABEL_SCHEDULE) == "share" else "share"
        await op_core.patch_node(node, cast(Any, {"metadata": {"labels": {c.LABEL_SCHEDULE: other}}}))

    async def _scheduled(self, core: client.CoreV1Api, name: str) -> str:
        """A GPU pod of POD_POOL created and scheduled (a break's); its node."""
        await core.create_namespaced_pod(NAMESPACE, cast(Any, _pod(name, POD_POOL, {c.RES_GPU_MEM: "1"})))
        self.holds[f"{NAMESPACE}/{name}"] = {c.RES_GPU_MEM: 1}

        async def bound() -> str | None:
            pod = await core.read_namespaced_pod(name, NAMESPACE, _request_timeout=T)
            return cast(str | None, pod.spec.node_name)

        return await wait_for(bound, what="the break's GPU pod scheduled", timeout_s=60, interval=0.5)

    async def _break_restart(self, core: client.CoreV1Api, op_core: client.CoreV1Api) -> None:
        """A node of POD_POOL's current ACK plugin pod deleted as the operator's user, as the
        operator deletes one (UID precondition): a restart no label change owes."""
        assert self.api is not None
        nodes = {
            n.metadata.name
            for n in await self._nodes()
            if (n.metadata.labels or {}).get(c.LABEL_POOL) == POD_POOL
        }
        selector = ",".join(f"{k}={v}" for k, v in c.DEFAULT_PLUGIN_LABELS.items())
        pods = await core.list_namespaced_pod(
            c.DEFAULT_PLUGIN_NAMESPACE, label_selector=selector, _request_timeout=T
        )
        pod = sorted((p for p in pods.items if p.spec.node_name in nodes), key=lambda p: p.metadata.name)[0]
        body = {"preconditions": {"uid": pod.metadata.uid}}
        await op_core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, body=cast(Any, body))
        self.out(f"soak: break plugin-restarts: deleted {pod.metadata.name} on {pod.spec.node_name}")

    @contextlib.asynccontextmanager
    async def _held_bodies(self) -> AsyncIterator[None]:
        """The rss break: HELD_BODIES HTTPS requests to the webhook's pod handler (its URL and CA
        from its configuration), each declaring the largest body the webhook accepts and sending
        all of it but the last byte, held while the caller reads the RSS (the webhook answers 408
        after its body time-out, 10 s)."""
        assert self.api is not None
        adm = client.AdmissionregistrationV1Api(self.api)
        conf = await adm.read_validating_webhook_configuration(WEBHOOK_CONFIGURATION, _request_timeout=T)
        hook = next(w for w in conf.webhooks if "pods" in w.rules[0].resources)
        url = urllib.parse.urlsplit(hook.client_config.url)
        ctx = ssl.create_default_context(cadata=base64.b64decode(hook.client_config.ca_bundle).decode())
        size = MAX_REVIEW_BYTES
        head = (
            f"POST {url.path} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\n\r\n"
        ).encode()
        body = b"{" + b" " * (size - 2)  # all but the last byte

        async def hold() -> asyncio.StreamWriter:
            _, writer = await asyncio.open_connection(url.hostname, url.port, ssl=ctx)
            writer.write(head + body)
            await writer.drain()
            return writer

        writers = await asyncio.gather(*(hold() for _ in range(HELD_BODIES)), return_exceptions=True)
        held = [w for w in writers if isinstance(w, asyncio.StreamWriter)]
        self.out(f"soak: rss break: {len(held)} requests of {size} bytes held at the webhook")
        await asyncio.sleep(1)  # the last bytes read by the webhook
        try:
            yield
        finally:
            for w in held:
                w.close()

    # -- the end's checks -------------------------------------------------------------------------
    async def _check_end(self) -> None:
        assert self.api is not None and self.info is not None
        left = await self._settled(READY_WITHIN_S - (time.monotonic() - self.last_fault_end), "end")
        self.report.checked["pools-ready"] = len(ACK_POOLS) + 1
        if left:
            for pool, why in left.items():
                self.report.violate(
                    "pools-ready",
                    f"GPUSharePool/{pool} not Ready {READY_WITHIN_S:.0f}s after the last fault ({why})",
                    await self._events(pool),
                )
        await self._check_labels()
        await self._check_agree()
        await self._check_keys()
        await self._restarts_settled()
        audit = list(self._audit())  # read once: every check below replays the same log
        self._check_audit(audit)
        await self._check_events(audit)
        await self._processes_up()
        if "rss" in self.breaks:
            async with self._held_bodies():
                self._check_rss()
        else:
            self._check_rss()
        self.report.checked["webhook-errors"] = self.samples
        if self.webhook_errors:
            self.report.violate(
                "webhook-errors", f"the webhook answered {self.webhook_errors:.0f} request(s) with an error"
            )

    async def _nodes(self) -> list[Any]:
        assert self.api is not None
        return list((await client.CoreV1Api(self.api).list_node(_request_timeout=T)).items)

    async def _check_labels(self) -> None:
        pools = await self._pools()
        nodes = await self._nodes()
        wanted: dict[str, dict[str, str]] = {}
        for pool in pools:
            spec = GPUSharePoolSpec.model_validate(pool["spec"])
            for node in nodes:
                if spec.node_selector.match_labels.items() <= (node.metadata.labels or {}).items():
                    wanted[node.metadata.name] = desired_labels(spec, pool["metadata"]["name"])
        for node in nodes:
            name = node.metadata.name
            base = self.before.get(name, {})
            if self.home.get(name) in ACK_POOLS.values():
                base = restored_by_ack(base)  # it left its ACK pool: what the pool gave it back
            diff = owned_label_diff(node.metadata.labels or {}, base, wanted.get(name))
            if diff:
                self.report.violate(
                    "owned-labels",
                    f"node {name}: (has, should have) {diff}",
                    self._audit_about("nodes", name),
                )
            annotations = node.metadata.annotations or {}
            if c.ANNOTATION_LOAN in annotations:
                self.report.violate(
                    "owned-labels",
                    f"node {name} still lent with lending off: {annotations[c.ANNOTATION_LOAN]}",
                    self._audit_about("nodes", name),
                )
            taints = [t.key for t in node.spec.taints or [] if t.key.startswith(c.GROUP)]
            if c.ANNOTATION_CORDONED_BY in annotations or taints:
                self.report.violate(
                    "no-cordon",
                    f"node {name} left cordoned or tainted by the operator"
                    f" (unschedulable={node.spec.unschedulable}, taints={taints})",
                    self._audit_about("nodes", name),
                )
        self.report.checked["owned-labels"] = len(nodes)
        self.report.checked["no-cordon"] = len(nodes)

    async def _check_agree(self) -> None:
        """metrics-agree: the leading replica (replica-0, PRIORITIES) exports what each pool's
        status says; it may lag a pass, so the end waits up to AGREE_WITHIN_S for it."""
        leader = self.replicas[0]
        deadline = time.monotonic() + AGREE_WITHIN_S
        while True:
            pools = await self._pools()
            text = await asyncio.to_thread(leader.metrics_text)
            apart = [d for pool in pools for d in status_metrics_disagree(pool, text or "")]
            if text is not None and not apart:
                self.report.checked["metrics-agree"] = len(pools)
                return
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(2)
        self.report.checked["metrics-agree"] = len(pools)
        if "metrics-agree" in self.breaks:  # the replicas resume
            gone = {"status": {BREAK_PEER: None}}
            await client.CustomObjectsApi(self.api).patch_cluster_custom_object(
                "kopf.dev", "v1", "clusterkopfpeerings", PEERING, gone, **MERGE_PATCH
            )
        if text is None:
            self.report.violate("metrics-agree", f"{leader.name} did not answer on its metrics port")
        for d in apart:
            self.report.violate("metrics-agree", d)

    async def _check_keys(self) -> None:
        """After the keys' grace: NVIDIA's ConfigMap holds the initial keys, the pools' and the
        nodes'; every key a node names exists."""
        assert self.api is not None
        core = client.CoreV1Api(self.api)
        deadline = time.monotonic() + RETENTION_S + 60
        extra: set[str] = set()
        missing: dict[str, str] = {}
        while True:
            cm = await core.read_namespaced_config_map(nv.CONFIGS_CONFIGMAP, nv.NAMESPACE, _request_timeout=T)
            keys = set((cm.data or {}).keys())
            named: dict[str, str] = {}
            for n in await self._nodes():
                if value := (n.metadata.labels or {}).get(c.LABEL_NVIDIA_CONFIG):
                    named[n.metadata.name] = value
            pool_keys = set()
            for pool in await self._pools():
                spec = GPUSharePoolSpec.model_validate(pool["spec"])
                key = desired_labels(spec, pool["metadata"]["name"]).get(c.LABEL_NVIDIA_CONFIG)
                if key:
                    pool_keys.add(key)
            extra = keys - self.initial_keys - pool_keys - set(named.values())
            missing = {n: v for n, v in named.items() if v not in keys}
            if (not extra and not missing) or time.monotonic() > deadline:
                break
            await asyncio.sleep(2)
        self.report.checked["nvidia-keys"] = self.report.checked.get("nvidia-keys", 0) + len(keys)
        if extra:
            self.report.violate(
                "nvidia-keys",
                f"keys no pool or node needs, {RETENTION_S}s grace passed: {sorted(extra)}",
                self._audit_about("configmaps", nv.CONFIGS_CONFIGMAP),
            )
        for node, key in missing.items():
            self.report.violate("nvidia-keys", f"node {node} names config {key!r}, absent from the ConfigMap")

    async def _processes_up(self) -> None:
        """Wait (up to 60 s) until every process answers on its metrics port: one started again
        late in the run is past its imports before its RSS is read (else the end reads a process
        still starting, a fraction of its settled size)."""
        assert self.webhook is not None
        for child in (*self.replicas, self.webhook):

            async def up(child: Child = child) -> bool:
                return await asyncio.to_thread(child.metric, "process_resident_memory_bytes") is not None

            with contextlib.suppress(TimeoutError):
                await wait_for(up, what=f"{child.name} answering", timeout_s=60, interval=0.5)

    def _check_rss(self) -> None:
        assert self.webhook is not None
        end: dict[str, int] = {}
        for child in (*self.replicas, self.webhook):
            rss = child.rss_kib()
            if rss:
                end[child.name] = rss
        # a role's first value against its value at the end (a restarted process counts as its role)
        checked = 0
        for role in ("replica", "webhook"):
            first = max((v for k, v in self.rss_first.items() if k.startswith(role)), default=0)
            last = max((v for k, v in end.items() if k.startswith(role)), default=0)
            if first and last:
                checked += 1
                self.report.notes.append(f"rss {role}: first settled {first} KiB, end {last} KiB")
                if last > RSS_FACTOR * first:
                    self.report.violate("rss", f"{role}: {last} KiB at the end, first settled {first} KiB")
        self.report.checked["rss"] = checked

    # -- the audit log ----------------------------------------------------------------------------
    def _audit(self) -> Iterator[dict[str, Any]]:
        assert self.info is not None
        path = self.info.log_dir / "audit.log"
        if not path.exists():
            return
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):  # a line cut by the apiserver's SIGKILL
                yield json.loads(line)

    def _audit_about(self, resource: str, name: str, limit: int = 12) -> list[str]:
        rows = [
            _audit_line(e)
            for e in self._audit()
            if (e.get("objectRef") or {}).get("resource") == resource
            and (e.get("objectRef") or {}).get("name") == name
        ]
        return rows[-limit:]

    def _check_audit(self, audit: list[dict[str, Any]]) -> None:
        node_patches = cms = 0
        for e in audit:
            if (e.get("user") or {}).get("username") != OPERATOR_USER:
                continue
            ref = e.get("objectRef") or {}
            resource, sub, verb = ref.get("resource"), ref.get("subresource"), e.get("verb")
            code = (e.get("responseStatus") or {}).get("code", 0)
            if resource == "nodes" and not sub and verb in ("patch", "update"):
                node_patches += 1
                loan = _annotation_written(e.get("requestObject"), c.ANNOTATION_LOAN)
                if loan is not None and code < 300:
                    self.report.detail[
                        "lending: loan writes (set)" if loan else "lending: loan writes (removed)"
                    ] += 1
                bad = _foreign_keys(e.get("requestObject"), verb)
                if bad:
                    self.report.violate(
                        "operator-writes",
                        f"the operator wrote {sorted(bad)} on node {ref.get('name')} (HTTP {code})",
                        [_audit_line(e)],
                    )
            elif resource == "configmaps" and verb != "get":
                cms += 1
                if (ref.get("namespace"), ref.get("name")) != (nv.NAMESPACE, nv.CONFIGS_CONFIGMAP):
                    self.report.violate(
                        "operator-configmaps",
                        f"the operator wrote ConfigMap {ref.get('namespace')}/{ref.get('name')}",
                        [_audit_line(e)],
                    )
        self._check_wait(audit)
        self._check_restarts(audit)
        self._check_evictions(audit, node_patches)
        self.report.checked["operator-writes"] = node_patches
        self.report.checked["operator-configmaps"] = cms

    async def _check_events(self, audit: list[dict[str, Any]]) -> None:
        """events-agree, from the audit log, the pools' Events and the replicas' logs
        (:func:`gpushare.devcluster.soakaudit.untold_writes`, :func:`~.unfounded`)."""
        assert self.api is not None
        listed = await client.CoreV1Api(self.api).list_namespaced_event(
            EVENTS_NAMESPACE, field_selector=f"involvedObject.kind={c.KIND}", _request_timeout=T
        )
        events: list[Told] = []
        for e in listed.items:
            at = e.first_timestamp or e.event_time or e.metadata.creation_timestamp
            t = told(e.involved_object.name, e.reason or "", at, e.message or "")
            if t is not None:
                events.append(t)
        writes = label_writes(audit)
        within = timedelta(seconds=TELL_WITHIN_S)
        mine = [w for w in writes if w.user == OPERATOR_USER]
        self.report.checked["events-agree"] = len(mine) + len(events)
        for u in untold_writes(
            writes,
            events,
            by=OPERATOR_USER,
            within=within,
            failed_posts=self._failed_posts(),
            kills=self.kills,
        ):
            what = (
                f"the operator changed {', '.join(u.write.changed)} of node {u.write.node} at"
                f" {u.write.at.isoformat()}; no write Event of a pool names it within {TELL_WITHIN_S:.0f}s"
            )
            if u.lost is not None:
                self.report.detail["events-agree: Event lost"] += 1
                self.report.notes.append(f"events-agree, counted apart: {what}: {u.lost}")
            else:
                self.report.violate("events-agree", what, _near(audit, "nodes", u.write.node, u.write.at))
        node_writes = [
            (str((e.get("objectRef") or {}).get("name")), when(e))
            for e in audit
            if (e.get("user") or {}).get("username") == OPERATOR_USER
            and (e.get("objectRef") or {}).get("resource") == "nodes"
            and e.get("verb") in ("patch", "update")
        ]
        for t, node in unfounded(events, node_writes, within=within):
            self.report.violate(
                "events-agree",
                f"Event {t.reason} of GPUSharePool {t.pool} at {t.at.isoformat()} names node {node},"
                f" which the operator did not write in the {TELL_WITHIN_S:.0f}s before: {t.message}",
                _near(audit, "nodes", node, t.at),
            )

    def _failed_posts(self) -> list[datetime]:
        """When a replica logged that posting a write Event failed."""
        out: list[datetime] = []
        for child in self.replicas:
            with contextlib.suppress(OSError):
                for line in child.log.read_text(errors="replace").splitlines():
                    if "Posting Event failed" not in line:
                        continue
                    with contextlib.suppress(ValueError, KeyError, TypeError):
                        rec = json.loads(line)
                        if rec.get("reason") in WRITE_REASONS:
                            out.append(datetime.fromisoformat(str(rec["timestamp"]).replace("Z", "+00:00")))
        return out

    def _check_wait(self, events: list[dict[str, Any]]) -> None:
        """wait-guard, from the audit log (:mod:`gpushare.devcluster.soakaudit`)."""
        changes = [m for m in mode_changes(events) if m.user == OPERATOR_USER]
        occupied = occupancies(events, self.holds)
        self.report.checked["wait-guard"] = len(changes)
        for breach in wait_breaches(changes, occupied, self.holds, by=OPERATOR_USER, race_s=RACE_S):
            start = breach.occupancy.bound - timedelta(seconds=1)
            window = [e for e in events if start <= when(e) <= breach.change.at + timedelta(seconds=2)]
            pod = breach.occupancy.pod.split("/")[1]
            evidence = [_audit_line(e) for e in window if (e.get("objectRef") or {}).get("name") == pod]
            evidence += [
                _audit_line(e) for e in window if (e.get("objectRef") or {}).get("name") == breach.change.node
            ][-8:]
            if breach.race:
                self.report.notes.append(f"wait race (documented, counted apart): {breach.text()}")
                self.report.notes.extend(f"  {line}" for line in evidence)
                self.report.detail["wait-guard race"] += 1
            else:
                self.report.violate("wait-guard", breach.text(), evidence)

    def _check_evictions(self, audit: list[dict[str, Any]], node_patches: int) -> None:
        """evictions, from the audit log (:func:`gpushare.devcluster.soakaudit.evictions`); checked
        against the operator's node patches (each could have come with an eviction) and evictions."""
        found = evictions(audit, by=OPERATOR_USER, evict_pools={EVICT_POOL}, namespaces={NAMESPACE})
        self.report.checked["evictions"] = node_patches + found.evicted + found.refused + found.deleted
        for what, n in (("done", found.evicted), ("refused by a PDB (429)", found.refused)):
            if n:
                self.report.detail[f"evictions {what}"] += n
        for what, evidence in found.violations:
            self.report.violate("evictions", what, evidence)

    def _check_restarts(self, audit: list[dict[str, Any]]) -> None:
        """plugin-restarts, from the audit log (:func:`gpushare.devcluster.soakaudit.plugin_restarts`)."""
        found = plugin_restarts(audit, by=OPERATOR_USER)
        self.report.checked["plugin-restarts"] = len(found.changes)
        for what, n in (
            ("by the operator", found.by_operator),
            ("old pod deleted by the soak first", found.by_others),
            ("no plugin pod", found.no_pod),
            ("carried to the next change", found.carried),
            ("owing none", found.excused),
        ):
            if n:
                self.report.detail[f"plugin-restarts {what}"] += n
        for what, evidence in found.violations:
            self.report.violate("plugin-restarts", what, evidence)

    async def _restarts_settled(self, timeout_s: float = 60) -> None:
        """Wait until no node carries a Pending plugin restart (a node that left every pool is the
        orphan owner's, after the pools are Ready)."""

        async def done() -> bool:
            with contextlib.suppress(*REFUSED):
                for n in await self._nodes():
                    raw = (n.metadata.annotations or {}).get(c.ANNOTATION_PLUGIN_RESTART)
                    record = RestartRecord.parse(raw)
                    if record is not None and record.state == "Pending":
                        return False
                return True
            return False

        with contextlib.suppress(TimeoutError):
            await wait_for(done, what="no plugin restart Pending", timeout_s=timeout_s, interval=1)

    async def _events(self, name: str) -> list[str]:
        assert self.api is not None
        with contextlib.suppress(*REFUSED):
            got = await client.CoreV1Api(self.api).list_namespaced_event(
                EVENTS_NAMESPACE, field_selector=f"involvedObject.name={name}", _request_timeout=T
            )
            return [f"event {e.last_timestamp or e.event_time} {e.reason}: {e.message}" for e in got.items][
                -12:
            ]
        return []


def _processes(comm: str) -> list[int]:
    """The PIDs of this host's processes named ``comm`` (the real node's containers run here)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() == comm:
                    out.append(int(entry.name))
    return out


def _pod(name: str, pool: str, limits: dict[str, str]) -> dict[str, Any]:
    """A GPU pod of ``pool``: on a kwok node kwok plays it; on the real node it runs the workload
    image (imported into its containerd), sleeping until deleted."""
    container = {
        "name": "c",
        "image": IMAGE_WORKLOAD,
        "imagePullPolicy": "Never",
        "args": ["--sleep", "3600"],
        "resources": {"limits": limits},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"gpushare.io/soak": "true"}},
        "spec": {
            "nodeSelector": {c.LABEL_POOL: pool},
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
        },
    }


def owned_label_diff(
    labels: dict[str, str], before: dict[str, str], want: dict[str, str] | None
) -> dict[str, tuple[str | None, str | None]]:
    """A node's owned labels that are not what they should be, as (has, should have): what its
    pool wants (``want``; an owned label the pool does not set keeps its value from before any
    pool), or with no pool what it had before any pool (``before``)."""
    expect = {k: (want or {}).get(k, before.get(k)) for k in c.MANAGED_LABELS}
    have = {k: labels.get(k) for k in c.MANAGED_LABELS}
    return {k: (have[k], expect[k]) for k in c.MANAGED_LABELS if have[k] != expect[k]}


class PoolAway(Exception):
    """An edit of a pool that a pool-recreate deleted: tried again once the pool is back."""

    def __init__(self, pool: str) -> None:
        super().__init__(f"GPUSharePool {pool} is deleted, to be created again")
        self.pool = pool


def restored_by_ack(before: dict[str, str]) -> dict[str, str]:
    """What an ACK pool gives back to a node that leaves it, from what it had before any pool:
    its labels, ``ack.node.gpu.schedule=default`` where it had none (the backend's rule)."""
    back = {**before, **ACK.restored(before)}
    return {k: v for k, v in back.items() if v is not None}


def _short(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        try:
            message = json.loads(exc.body or "{}").get("message", "")
        except (ValueError, AttributeError):
            message = ""
        return f"HTTP {exc.status} {exc.reason} {message}"[:300]
    return f"{type(exc).__name__}: {exc}"[:160]


def _audit_line(e: dict[str, Any]) -> str:
    ref = e.get("objectRef") or {}
    what = "/".join(x for x in (ref.get("resource"), ref.get("subresource")) if x)
    code = (e.get("responseStatus") or {}).get("code", "")
    body = json.dumps(e.get("requestObject"), sort_keys=True)[:300] if e.get("requestObject") else ""
    user = (e.get("user") or {}).get("username")
    when = e.get("requestReceivedTimestamp", "")
    return f"audit {when} {user} {e.get('verb')} {what} {ref.get('name')} -> {code} {body}"


async def _until_deleted(delete: Callable[[], Awaitable[Any]]) -> None:
    """``delete`` tried each second until it succeeds or answers 404 (gone already)."""
    while True:
        try:
            await delete()
            return
        except ApiException as exc:
            if exc.status == 404:
                return
        except REFUSED:
            pass
        await asyncio.sleep(1)


def _rollout_text(rollout: Mapping[str, Any]) -> str:
    return f"{rollout['modeSwitch']}/{rollout['maxUnavailable']}"


def _near(audit: list[dict[str, Any]], resource: str, name: str, at: datetime, limit: int = 6) -> list[str]:
    """The audit records of one object from 5 s before ``at`` to TELL_WITHIN_S after it."""
    start, end = at - timedelta(seconds=5), at + timedelta(seconds=TELL_WITHIN_S)
    return [
        _audit_line(e)
        for e in audit
        if (e.get("objectRef") or {}).get("resource") == resource
        and (e.get("objectRef") or {}).get("name") == name
        and start <= when(e) <= end
    ][:limit]


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def metric_sum(text: str, name: str, **labels: str) -> float | None:
    """The sum of the samples ``name`` with ``labels`` in a /metrics text; None when there is none."""
    from prometheus_client.parser import text_string_to_metric_families

    values = [
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    return sum(values) if values else None


def status_metrics_disagree(pool: dict[str, Any], text: str) -> list[str]:
    """Where the gauges in a /metrics text say other than the pool's status: each condition
    (``gpushare_pool_condition``: 1 when True), the matched nodes, the mode (pure)."""
    name = pool["metadata"]["name"]
    status = pool.get("status") or {}
    out = []
    by_type = {cond.get("type"): cond.get("status") for cond in status.get("conditions") or []}
    for ctype in ("Ready", "Progressing", "Degraded", "Conflict"):
        said = 1.0 if by_type.get(ctype) == "True" else 0.0
        gauge = metric_sum(text, "gpushare_pool_condition", pool=name, condition=ctype)
        if gauge != said:
            out.append(
                f"GPUSharePool/{name}: {ctype} is {by_type.get(ctype)}, gpushare_pool_condition says {gauge}"
            )
    matched = float((status.get("nodes") or {}).get("matched", 0))
    gauge = metric_sum(text, "gpushare_pool_matched_nodes", pool=name)
    if gauge != matched:
        out.append(
            f"GPUSharePool/{name}: status.nodes.matched is {matched:.0f},"
            f" gpushare_pool_matched_nodes says {gauge}"
        )
    if (
        status.get("schedule")
        and metric_sum(text, "gpushare_pool_info", pool=name, mode=status["schedule"]) != 1
    ):
        out.append(
            f"GPUSharePool/{name}: status.schedule is {status['schedule']},"
            " gpushare_pool_info has no such mode"
        )
    return out


def _annotation_written(obj: Any, key: str) -> str | None:
    """What a node write sets annotation ``key`` to: its value, "" where it removes it, None where
    it does not touch it."""
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") if isinstance(obj, dict) else None
    if not isinstance(annotations, dict) or key not in annotations:
        return None
    return str(annotations[key] or "")


def _foreign_keys(obj: Any, verb: str) -> set[str]:
    """The label and annotation keys a node write touches that the operator does not own: labels
    outside MANAGED_LABELS, annotations outside gpushare.io/. A PUT (``update``) carries the whole
    node, so only its ``gpushare.io/`` annotations and owned labels are the operator's: the soak
    reports a PUT as foreign (the operator patches)."""
    if verb == "update":
        return {"<PUT of the whole node>"}
    labels: set[str] = set()
    annotations: set[str] = set()
    if isinstance(obj, dict):
        meta = obj.get("metadata") or {}
        labels |= set((meta.get("labels") or {}).keys())
        annotations |= set((meta.get("annotations") or {}).keys())
    elif isinstance(obj, list):  # JSON patch
        for op in obj:
            path = str(op.get("path", ""))
            for prefix, into in (("/metadata/labels", labels), ("/metadata/annotations", annotations)):
                if path == prefix:
                    into |= set((op.get("value") or {}).keys())
                elif path.startswith(prefix + "/"):
                    into.add(_unescape(path[len(prefix) + 1 :]))
    bad = {f"label {k}" for k in labels if k not in c.MANAGED_LABELS}
    bad |= {f"annotation {k}" for k in annotations if not k.startswith(c.GROUP + "/")}
    return bad


def run_soak(
    seed: int,
    seconds: float,
    workdir: Path | None = None,
    *,
    out: Callable[[str], None] = print,
    breaks: tuple[str, ...] = (),
    real_node: bool = False,
) -> Report:
    """Run a soak (from the main thread: it starts the control plane); its report."""
    d = workdir or Path(tempfile.mkdtemp(prefix="gpushare-soak-"))
    d.mkdir(parents=True, exist_ok=True)
    report = asyncio.run(Soak(seed, seconds, d, out=out, breaks=breaks, real_node=real_node).run())
    out(report.text())
    if report.violations or workdir is not None:
        out(f"soak: logs and the audit log are in {d}")
    else:  # a passing run in a directory of its own leaves nothing behind
        shutil.rmtree(d, ignore_errors=True)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpushare.devcluster.soak", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--minutes", type=float, default=10.0, help="length of the schedule (faults and work)"
    )
    parser.add_argument("--dir", type=Path, help="where logs go (default: a new temporary directory)")
    parser.add_argument("--schedule-only", action="store_true", help="print the schedule and exit")
    parser.add_argument(
        "--real-node", action="store_true",
        help="a real kubelet node too (root, containerd: `make realnode`), moved between"
        " an ACK pool and the NVIDIA pool, its kubelet restarted and NVIDIA's config-manager killed",
    )  # fmt: skip
    parser.add_argument(
        "--break", dest="breaks", action="append", choices=sorted(BREAKS), default=[], metavar="INVARIANT",
        help="once the schedule is over, break this invariant on purpose (the run must then fail naming it;"
        f" repeatable): {'; '.join(f'{k}: {v}' for k, v in BREAKS.items())}",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.schedule_only:
        print(format_schedule(args.seed, make_schedule(args.seed, args.minutes * 60, real=args.real_node)))
        return 0
    try:
        report = run_soak(
            args.seed, args.minutes * 60, args.dir, breaks=tuple(args.breaks), real_node=args.real_node
        )
    except (BinariesMissing, RealNodeUnavailable) as exc:  # each says what to build or run first
        print(f"soak: cannot start: {exc}", file=sys.stderr)
        return 2
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
