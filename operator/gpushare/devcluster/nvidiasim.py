"""What NVIDIA's device plugin and its config-manager sidecar make a kwok node advertise (pure).

``pluginsim`` plays NVIDIA's stack on the kwok nodes labelled ``gpushare.io/fake-plugin=nvidia``
(``create_gpu_nodes(plugin="nvidia")``) and does the side effects; this module decides. It models
what the project saw of the real stack (``gpushare.devcluster.nvidia``'s docstring, on the real
node with v0.19.3) and what ``shared/reference/nvidia-backend.md`` §1 states:

* config-manager reads the node's ``nvidia.com/device-plugin.config`` label, picks that key of the
  plugin's named-config ConfigMap, and the plugin advertises ``replicas x GPUs`` of the config's
  resource: ``nvidia.com/gpu``, or ``nvidia.com/gpu.shared`` with ``renameByDefault`` (a
  resource's own ``rename`` wins). A config without ``sharing`` advertises the GPUs once each.
* It acts when a plugin pod starts and when the label's **value** changes, nothing else: a
  ConfigMap edit of the key in use changes nothing until then.
* No label: the config named :data:`DEFAULT_CONFIG` (config-manager's ``DEFAULT_CONFIG``).
* **An unknown name** (a key the ConfigMap does not hold) makes the sidecar exit; each restart
  first applies the default and then fails again, so the node falls back to the default config,
  silently. Should the key appear later, the crash-looping sidecar's next restart applies it.
  Without a ``default`` key, the ``single`` fallback (the ConfigMap's only key) applies, as the
  DaemonSet's ``FALLBACK_STRATEGIES=named,single`` says; with neither, no config can be chosen and
  the plugin does not register (the node's resources stay as they were).

What is not modelled: the kubelet's delay in rewriting a pod's ConfigMap volume (59-90 s seen on
the real node; the simulator reads the ConfigMap from the API at once, so a short
``configPropagationSeconds`` suffices on ``make cluster``), the kubelet's 10 s node-status sync,
and GPU Feature Discovery's relabelling of a shared node (``nvidia.com/gpu.product`` ``-SHARED``,
``gpu.replicas``...): the node keeps the GFD labels it was created with.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

from gpushare import constants as c
from gpushare.devcluster import migsim
from gpushare.devcluster.nvidia import DEFAULT_CONFIG
from gpushare.gpu.fake import FakeGPU
from gpushare.gpu.inventory import label_value

#: ``gpushare.io/fake-plugin`` on the kwok nodes whose NVIDIA plugin the simulator plays.
SIMULATED_VALUE = "nvidia"
#: The resources written on every registration (the one not advertised as 0, as the kubelet keeps
#: a resource whose plugin went: capacity 0).
RESOURCES: tuple[str, ...] = (c.RES_NVIDIA_GPU, c.RES_NVIDIA_GPU_SHARED)


@dataclass(frozen=True)
class Started:
    """What the simulated plugin runs with on a node (the node's ``gpushare.io/simulated-plugin``)."""

    #: The plugin pod's UID.
    pod: str
    #: The config label's value config-manager last read ("" none).
    label: str
    #: The ConfigMap key in effect (None: none could be chosen, the plugin did not register).
    config: str | None
    #: The node's MIG devices it started with (``migsim.MigState.token``; "" none recorded).
    mig: str = ""


def wanted(label: str) -> str:
    """The key config-manager looks for: the label's value, the default without one."""
    return label or DEFAULT_CONFIG


def effective_config(label: str, configs: Mapping[str, str]) -> str | None:
    """The key in effect once config-manager has done what it does for ``label``: the wanted key
    when the ConfigMap holds it, else the fallback (``named``: ``default``; ``single``: the only
    key), else None."""
    if wanted(label) in configs:
        return wanted(label)
    if DEFAULT_CONFIG in configs:
        return DEFAULT_CONFIG
    if len(configs) == 1:
        return next(iter(configs))
    return None


def decide(
    pod: str, label: str, configs: Mapping[str, str], seen: Started | None, mig: str = ""
) -> Started | None:
    """What the plugin runs with now, when that changed (None: nothing to do).

    A new plugin pod or a new label value: config-manager applies the label's config (or falls
    back). Otherwise it acts only while crash-looping on a key the ConfigMap lacked: each restart
    applies what is there now. ``mig``: the node's MIG devices (``MigState.token``): when the MIG
    manager changed them, the plugin starts again (its paused DaemonSet pod comes back)."""
    if seen is not None and seen.pod == pod and seen.label == label and seen.mig == mig:
        if seen.config == wanted(label):
            return None
        now = effective_config(label, configs)
        return None if now == seen.config else Started(pod, label, now, mig)
    return Started(pod, label, effective_config(label, configs), mig)


def advertised(
    document: str, gpus: int, mig: Sequence[migsim.Devices] | None = None
) -> dict[str, str] | None:
    """The extended resources the plugin registers with ``document`` (a plugin config, YAML) on a
    node with ``gpus`` GPUs, every one of :data:`RESOURCES` present; None for a document the
    plugin cannot read (it does not start). ``mig``: each GPU's MIG devices as the MIG manager
    left them (:mod:`gpushare.devcluster.migsim`), advertised under the config's
    ``flags.migStrategy`` with its per-resource time-slicing."""
    try:
        body = yaml.safe_load(document)
    except yaml.YAMLError:
        return None
    if not isinstance(body, dict):
        return None
    strategy = str((body.get("flags") or {}).get("migStrategy") or "none")
    if strategy != "none" or any(mig or ()):
        return _mig_advertised(body, strategy, list(mig or [()] * gpus))
    out = dict.fromkeys(RESOURCES, 0)
    shared = _shared_resources(body.get("sharing"))
    if shared is None:
        return None
    out[c.RES_NVIDIA_GPU] = gpus
    for name, replicas in shared.items():
        if name != c.RES_NVIDIA_GPU:
            out[c.RES_NVIDIA_GPU] = 0
        out[name] = gpus * replicas
    return {name: str(value) for name, value in out.items()}


def _mig_advertised(
    body: Mapping[str, Any], strategy: str, devices: list[migsim.Devices]
) -> dict[str, str] | None:
    sharing = body.get("sharing") or {}
    sliced = sharing.get("timeSlicing") if isinstance(sharing, dict) else None
    replicas = {
        str(r.get("name")): int(r.get("replicas") or 1)
        for r in ((sliced or {}).get("resources") or [])
        if isinstance(r, dict) and isinstance(r.get("replicas"), int)
    }
    counts = migsim.advertised(strategy, devices, replicas)
    if counts is None:
        return None
    out = dict.fromkeys(RESOURCES, 0) | counts
    return {name: str(value) for name, value in out.items()}


def _shared_resources(sharing: Any) -> dict[str, int] | None:
    """``{advertised name: replicas}`` of the config's ``nvidia.com/gpu`` (``{}``: not shared);
    None when unreadable."""
    if sharing is None:
        return {}
    if not isinstance(sharing, dict):
        return None
    strategy = sharing.get("timeSlicing") or sharing.get("mps")
    if not isinstance(strategy, dict):
        return {}
    rename_by_default = strategy.get("renameByDefault") is True
    out: dict[str, int] = {}
    for resource in strategy.get("resources") or []:
        if not isinstance(resource, dict) or resource.get("name") != c.RES_NVIDIA_GPU:
            continue
        replicas = resource.get("replicas")
        if not isinstance(replicas, int) or replicas < 1:
            return None
        rename = resource.get("rename") or (f"{c.RES_NVIDIA_GPU}.shared" if rename_by_default else "")
        out[str(rename) or c.RES_NVIDIA_GPU] = replicas
    return out


def status_patch(resources: Mapping[str, str]) -> dict[str, Any]:
    """The merge patch of the node's status subresource for the plugin registering ``resources``."""
    return {"status": {"capacity": dict(resources), "allocatable": dict(resources)}}


def state_annotation(started: Started, now: datetime) -> str:
    return json.dumps(
        {
            "pod": started.pod,
            "label": started.label,
            "config": started.config,
            "mig": started.mig,
            "at": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def parse_state(raw: str | None) -> Started | None:
    """The annotation back (None: absent, unreadable, or written for ACK's plugin)."""
    try:
        data = json.loads(raw or "")
    except ValueError:
        return None
    if not isinstance(data, dict) or "label" not in data:
        return None
    config = data.get("config")
    return Started(
        str(data.get("pod", "")),
        str(data.get("label") or ""),
        None if config is None else str(config),
        str(data.get("mig") or ""),
    )


# -- the labels of an NVIDIA GPU node, before any sharing -----------------------------------------

#: ``(family, compute major, compute minor)`` by the start of an NVIDIA product name.
_ARCHITECTURES: tuple[tuple[str, tuple[str, int, int]], ...] = (
    ("NVIDIA A100", ("ampere", 8, 0)),
    ("NVIDIA A10", ("ampere", 8, 6)),
    ("NVIDIA H100", ("hopper", 9, 0)),
    ("NVIDIA H200", ("hopper", 9, 0)),
    ("Tesla V100", ("volta", 7, 0)),
    ("Tesla T4", ("turing", 7, 5)),
)


def gfd_labels(gpus: Sequence[FakeGPU]) -> dict[str, str]:
    """The labels GPU Feature Discovery (v0.19.3, ``internal/lm``) and the GPU Operator's
    ``nvidia.com/gpu.present`` give a node with ``gpus`` (all of one model) and no sharing config:
    ``resource.go`` ``baseLabeler`` (product, count, replicas, sharing-strategy, memory), the
    architecture labeler (family, compute capability), ``nvml.go`` (``gpu.mode``, ``mig.capable``,
    ``mps.capable``). What sharing would change in them is ``gpushare.constants.NVIDIA_SHARING_LABELS``."""
    if not gpus:
        return {}
    first = gpus[0]
    family, major, minor = next(
        (arch for prefix, arch in _ARCHITECTURES if first.name.startswith(prefix)), ("unknown", 0, 0)
    )
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": label_value(first.name),
        c.LABEL_NVIDIA_GPU_COUNT: str(len(gpus)),
        "nvidia.com/gpu.memory": str(first.memory_mib),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/mig.capable": "true" if first.mig is not None else "false",
        "nvidia.com/mps.capable": "false",
    }
    if major:
        labels |= {"nvidia.com/gpu.compute.major": str(major), "nvidia.com/gpu.compute.minor": str(minor)}
    return labels
