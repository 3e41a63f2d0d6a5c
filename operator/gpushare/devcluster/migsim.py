"""What NVIDIA's MIG manager makes of a kwok node's ``nvidia.com/mig.config`` label (pure).

``pluginsim`` plays the MIG manager (github.com/NVIDIA/mig-parted, ``nvidia-mig-manager`` and its
``reconfigure-mig.sh``) beside NVIDIA's device plugin on the kwok nodes labelled
``gpushare.io/fake-plugin=nvidia``, and does the side effects; this module decides. It follows the
label and state contract of ``shared/reference/mig.md``:

* The manager acts when the node's ``nvidia.com/mig.config`` **value changes** (not on a ConfigMap
  edit, nor when the same value is set again), and does nothing on a node without the label.
* It sets ``nvidia.com/mig.config.state=pending``, pauses the GPU operands (each
  ``nvidia.com/gpu.deploy.<operand>`` label the node carries as ``true`` becomes
  ``paused-for-mig-change``), applies the named config from its ConfigMap, then sets the operands
  back to ``true`` and the state to ``success``, or to ``failed`` when the config is not in the
  ConfigMap or a GPU cannot hold it (then, as NVIDIA's script does, ``nvsm`` stays paused:
  :data:`KEPT_PAUSED_ON_FAILURE`). The device plugin then advertises the new MIG devices (the
  simulator restarts the plugin, as the paused operand's DaemonSet pod coming back does).
* The manager reads one file, the ConfigMap's ``config.yaml`` (the GPU Operator's
  ``CONFIG_FILE``), a mig-parted file (``version: v1``, ``mig-configs:``), and looks the config up
  there only; other keys are ignored (gpushare adds its configs as entries of that file beside the
  chart's).
* An entry applies to the GPUs whose PCI device id its ``device-filter`` names (every GPU without
  one); a GPU takes the first entry that applies to it, and no entry leaves MIG disabled there.

What a GPU can hold is modelled by its slices, not its placements: the profiles' compute slices
must sum to at most 7 and their memory slices to at most 8, with no more of a profile than the
GPU allows (NVIDIA's MIG user guide, per model). A100-SXM4-40GB: ``3g.20gb`` twice and ``1g.5gb``
once takes 9 memory slices, so it fails. Not modelled: reboots (``rebooting``), the time a real
reconfiguration takes (a node annotation sets the simulated one; another how long the manager takes
to start on a new value, keeping the previous config's state meanwhile), GPU Feature Discovery's MIG labels.
A node annotated ``gpushare.io/simulated-mig-hang=true`` stays ``pending`` with its operands
paused: the wedge of mig-parted #485.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from gpushare import constants as c
from gpushare.backends.nvidia import migfile

#: The operands the MIG manager pauses, as ``nvidia.com/gpu.deploy.<operand>`` labels.
OPERANDS = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm")
#: The operands NVIDIA's reconfigure-mig.sh (v0.10.0) pauses but does not set back when it fails:
#: its exit path relabels the other four, its success path all five.
KEPT_PAUSED_ON_FAILURE = ("nvsm",)
DEPLOY_PREFIX = "nvidia.com/gpu.deploy."
PAUSED = "paused-for-mig-change"
PENDING, SUCCESS, FAILED = "pending", "success", "failed"
#: How long the simulated reconfiguration takes unless the node says otherwise.
DEFAULT_DELAY = timedelta(seconds=1)

#: A profile's (compute slices, memory slices, most per GPU).
Slices = tuple[int, int, int]
_A100_40GB: dict[str, Slices] = {
    "1g.5gb": (1, 1, 7),
    "1g.5gb+me": (1, 1, 1),
    "1g.10gb": (1, 2, 4),
    "2g.10gb": (2, 2, 3),
    "3g.20gb": (3, 4, 2),
    "4g.20gb": (4, 4, 1),
    "7g.40gb": (7, 8, 1),
}
_80GB: dict[str, Slices] = {
    "1g.10gb": (1, 1, 7),
    "1g.10gb+me": (1, 1, 1),
    "1g.20gb": (1, 2, 4),
    "2g.20gb": (2, 2, 3),
    "3g.40gb": (3, 4, 2),
    "4g.40gb": (4, 4, 1),
    "7g.80gb": (7, 8, 1),
}
#: By product name (as NVML names it): the PCI device id mig-parted filters by, the profiles.
MODELS: dict[str, tuple[str, Mapping[str, Slices]]] = {
    "NVIDIA A100-SXM4-40GB": ("0x20B010DE", _A100_40GB),
    "NVIDIA A100-PCIE-40GB": ("0x20F110DE", _A100_40GB),
    "NVIDIA A100-SXM4-80GB": ("0x20B210DE", _80GB),
    "NVIDIA H100 80GB HBM3": ("0x233010DE", _80GB),
}
COMPUTE_SLICES, MEMORY_SLICES = 7, 8

#: The chart's own configs (a few of NVIDIA's default ``config.yaml``), under its key: the one
#: file the MIG manager reads, where gpushare adds its configs as entries.
CHART_KEY = migfile.CONFIG_KEY
CHART_DOCUMENT = yaml.safe_dump(
    {
        "version": "v1",
        "mig-configs": {
            "all-disabled": [{"devices": "all", "mig-enabled": False}],
            "all-1g.5gb": [
                {
                    "device-filter": ["0x20B010DE"],
                    "devices": "all",
                    "mig-enabled": True,
                    "mig-devices": {"1g.5gb": 7},
                }
            ],
            "all-balanced": [
                {
                    "device-filter": ["0x20B010DE"],
                    "devices": "all",
                    "mig-enabled": True,
                    "mig-devices": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
                }
            ],
        },
    },
    sort_keys=False,
)

#: A GPU's MIG devices: (profile, count) sorted; empty: MIG disabled.
Devices = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class MigState:
    """What the simulated manager last did on a node (its ``gpushare.io/simulated-mig`` annotation)."""

    #: The label value it acted on ("" none).
    label: str
    #: pending, success or failed.
    state: str
    #: When it set ``state`` (pending: when it started).
    since: datetime
    #: Each GPU's MIG devices now.
    devices: tuple[Devices, ...] = ()
    #: Why it failed ("" otherwise).
    reason: str = ""

    def to_json(self) -> str:
        return json.dumps(
            {
                "label": self.label,
                "state": self.state,
                "since": self.since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "devices": [dict(d) for d in self.devices],
                "reason": self.reason,
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def parse(cls, raw: str | None) -> MigState | None:
        try:
            data = json.loads(raw or "")
            since = datetime.fromisoformat(str(data["since"]).replace("Z", "+00:00"))
            devices = tuple(
                tuple(sorted((str(p), int(n)) for p, n in d.items())) for d in data.get("devices") or []
            )
            return cls(str(data["label"]), str(data["state"]), since, devices, str(data.get("reason") or ""))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    @property
    def token(self) -> str:
        """What the device plugin's view of the node's MIG devices depends on."""
        return json.dumps([dict(d) for d in self.devices], sort_keys=True)


def configs_in(data: Mapping[str, str]) -> dict[str, list[Any]]:
    """Every named config of the ConfigMap's ``config.yaml``, the one file NVIDIA's MIG manager
    reads (``CONFIG_FILE``; every other key is ignored, as the manager ignores it). Empty when
    that file is absent or not a mig-parted file."""
    try:
        body = yaml.safe_load(data.get(CHART_KEY) or "")
    except yaml.YAMLError:
        return {}
    configs = body.get("mig-configs") if isinstance(body, dict) else None
    out: dict[str, list[Any]] = {}
    for name, entries in configs.items() if isinstance(configs, dict) else ():
        if isinstance(entries, list):
            out[str(name)] = entries
    return out


def _entry_for(entries: Sequence[Any], pci: str) -> Mapping[str, Any] | None:
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        wanted = entry.get("device-filter")
        if wanted is None or pci.lower() in {str(w).lower() for w in wanted}:
            return entry
    return None


def hold_problem(model: str, devices: Mapping[str, int]) -> str | None:
    """Why a GPU of product ``model`` cannot hold ``devices`` (None: it can)."""
    known = MODELS.get(model)
    if known is None:
        return f"{model or 'the GPU'} is not MIG-capable"
    table = known[1]
    unknown = sorted(p for p in devices if p not in table)
    if unknown:
        return f"{model} has no MIG profile {', '.join(unknown)}"
    too_many = sorted(p for p, n in devices.items() if n > table[p][2])
    if too_many:
        return f"{model} holds at most " + ", ".join(f"{table[p][2]} x {p}" for p in too_many)
    compute = sum(table[p][0] * n for p, n in devices.items())
    memory = sum(table[p][1] * n for p, n in devices.items())
    if compute > COMPUTE_SLICES or memory > MEMORY_SLICES:
        return (
            f"{model} has {COMPUTE_SLICES} compute and {MEMORY_SLICES} memory slices; "
            f"{', '.join(f'{n} x {p}' for p, n in sorted(devices.items()))} take {compute} and {memory}"
        )
    return None


def apply(
    name: str, configs: Mapping[str, Sequence[Any]], gpus: Sequence[tuple[str, bool]]
) -> tuple[Devices, ...] | str:
    """Each GPU's MIG devices under config ``name`` (``gpus``: product name, MIG-capable), or why
    the manager fails."""
    entries = configs.get(name)
    if entries is None:
        return f"config {name} is not in the MIG manager's ConfigMap"
    out: list[Devices] = []
    for index, (model, capable) in enumerate(gpus):
        entry = _entry_for(entries, MODELS.get(model, ("", {}))[0])
        if entry is None or not entry.get("mig-enabled"):
            out.append(())
            continue
        raw = entry.get("mig-devices") or {}
        devices = {str(p): n for p, n in raw.items() if isinstance(n, int)} if isinstance(raw, dict) else {}
        why = hold_problem(model, devices) if capable else f"{model} is not MIG-capable"
        if why is not None:
            return f"GPU {index}: {why}"
        out.append(tuple(sorted((p, n) for p, n in devices.items() if n > 0)))
    return tuple(out)


@dataclass(frozen=True)
class Step:
    """What the manager writes on the node now: the state label, the operand labels, its record."""

    state: MigState
    labels: Mapping[str, str]
    #: When to look again (None: nothing left to do until the label changes).
    again: timedelta | None = None


def _operands(labels: Mapping[str, str], to: str, *, failed: bool = False) -> dict[str, str]:
    keys = [DEPLOY_PREFIX + o for o in OPERANDS if not (failed and o in KEPT_PAUSED_ON_FAILURE)]
    frm = "true" if to == PAUSED else PAUSED
    return {k: to for k in keys if labels.get(k) == frm}


def decide(
    labels: Mapping[str, str],
    seen: MigState | None,
    configs: Mapping[str, Sequence[Any]],
    gpus: Sequence[tuple[str, bool]],
    now: datetime,
    *,
    delay: timedelta = DEFAULT_DELAY,
    hang: bool = False,
    start: timedelta = timedelta(0),
    noticed: datetime | None = None,
) -> Step | None:
    """The manager's next step on a node with ``labels`` (None: nothing to do now). ``start``: how
    long after it ``noticed`` a new label value it goes ``pending`` (the node keeps the previous
    config's state meanwhile: the stale ``success`` a real manager leaves until it starts)."""
    label = labels.get(c.LABEL_MIG_CONFIG, "")
    devices = seen.devices if seen is not None else tuple(() for _ in gpus)
    if not label and seen is None:
        return None
    if seen is None or seen.label != label:
        if not label:  # the label went: the manager has nothing to apply, the GPUs stay as they are
            return Step(MigState("", seen.state, now, devices, seen.reason), {}) if seen else None
        if seen is not None and noticed is not None and now - noticed < start:
            return Step(seen, {}, start - (now - noticed))
        pending = MigState(label, PENDING, now, devices)
        return Step(pending, {c.LABEL_MIG_CONFIG_STATE: PENDING, **_operands(labels, PAUSED)}, delay)
    if seen.state != PENDING or hang:
        return None
    if now - seen.since < delay:
        return Step(seen, {}, delay - (now - seen.since))
    result = apply(label, configs, gpus)
    done = (
        MigState(label, FAILED, now, devices, result)
        if isinstance(result, str)
        else MigState(label, SUCCESS, now, result)
    )
    back = _operands(labels, "true", failed=done.state == FAILED)
    return Step(done, {c.LABEL_MIG_CONFIG_STATE: done.state, **back})


def advertised(
    strategy: str, devices: Sequence[Devices], replicas: Mapping[str, int]
) -> dict[str, int] | None:
    """What the device plugin advertises of a node's GPUs with MIG strategy ``strategy`` (``none``,
    ``single``, ``mixed``) and ``replicas`` per resource name (time-slicing): whole GPUs without MIG
    as ``nvidia.com/gpu``; under ``mixed`` each profile as ``nvidia.com/mig-<profile>``; under
    ``single`` the MIG devices as ``nvidia.com/gpu``, every GPU with one and the same profile (else
    the plugin does not start: None)."""
    whole = sum(1 for d in devices if not d)
    out: dict[str, int] = {}
    if strategy == "mixed":
        out[c.RES_NVIDIA_GPU] = whole
        for d in devices:
            for profile, n in d:
                out[c.RES_NVIDIA_MIG_PREFIX + profile] = out.get(c.RES_NVIDIA_MIG_PREFIX + profile, 0) + n
    elif strategy == "single":
        kinds = {d for d in devices if d}
        if kinds and (whole or len(kinds) > 1 or len(next(iter(kinds))) != 1):
            return None
        out[c.RES_NVIDIA_GPU] = sum(n for d in devices for _, n in d) if kinds else len(devices)
    else:
        out[c.RES_NVIDIA_GPU] = len(devices)
    return {name: n * replicas.get(name, 1) for name, n in out.items()}
