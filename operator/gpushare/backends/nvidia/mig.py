"""NVIDIA's MIG pools behind :class:`gpushare.backends.base.SharingBackend`: a backend of their own.

A MIG pool sets two labels on each node: ``nvidia.com/mig.config`` (the geometry, which NVIDIA's
MIG manager applies, :mod:`gpushare.backends.nvidia.migconfig`) and, as a time-slicing pool does,
``nvidia.com/device-plugin.config`` (the device plugin's MIG strategy and the slices' time-slicing,
:mod:`gpushare.backends.nvidia.config`). Its own backend rather than a branch of NVIDIA's: it owns
one more label, its mode is the geometry (any change of it destroys the GPU instances running pods
use: always a mode switch), and its evidence reads the MIG manager's state. A node moved between a
time-slicing pool and a MIG pool is a move between two backends, which the planner already makes
(the old backend's labels restored, the new one's applied, in one guarded patch).

The mode of a node is its ``nvidia.com/mig.config`` value. A node advertises a MIG pool's mode when
the MIG manager reports ``nvidia.com/mig.config.state=success`` for that value and the node
advertises the geometry's devices (``nvidia.com/mig-<profile>`` per GPU x GPUs x the profile's
replicas under ``mixed``; ``nvidia.com/gpu`` under ``single``). A state from before the switch (the
previous config's ``success``) is never taken: gpushare writes its record of the switch
(``gpushare.io/mig-switch``, :mod:`gpushare.backends.nvidia.migstate`) in the same patch as the
label, marks it once it sees the manager working (``pending``/``rebooting``) on that config, or
the node's managedFields show the manager wrote the state after the record (the operator was down
while it worked: :func:`gpushare.backends.nvidia.migstate.written_after`), and trusts a
``success`` only after that. The pool's status names a ``failed`` config, a state stuck
past ``readyTimeoutSeconds`` and operands left ``paused-for-mig-change`` (:meth:`MigBackend.switch_state`).

What a node advertises is known once a pool with its two labels' values was seen
(:meth:`MigBackend.labels_for`, :meth:`MigBackend.pool_mode`): each name is a digest of its
content, so the pair stands for one geometry and one time-slicing only. For a config gpushare
did not write (a pool naming an existing config, ``mig.config``; a node's own config given back
when it leaves), only some NVIDIA GPU device advertised is required: right after gpushare writes
such a label, gpushare's record still keeps the previous config's ``success`` from being taken.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Final

from gpushare import constants as c
from gpushare.api.quantity import quantity_int
from gpushare.api.v1alpha1 import GPUSharePoolSpec, Mig
from gpushare.backends.base import GpuSize, NodePhaseName
from gpushare.backends.nvidia import config, migconfig, migfit, migstate
from gpushare.backends.nvidia.backend import NvidiaBackend, physical_gpus


@dataclass(frozen=True)
class Expected:
    """What a node advertises per GPU under a geometry: one map per GPU model (resource -> count
    per GPU, time-slicing replicas included)."""

    per_gpu: tuple[Mapping[str, int], ...]

    @classmethod
    def of(cls, mig: Mig) -> Expected:
        out: list[dict[str, int]] = []
        for g in mig.geometry or ():
            counts: dict[str, int] = {}
            for profile, n in g.profiles.items():
                resource = c.RES_NVIDIA_GPU if mig.strategy == "single" else c.RES_NVIDIA_MIG_PREFIX + profile
                counts[resource] = counts.get(resource, 0) + n * mig.replicas_of(profile)
            out.append(counts)
        return cls(tuple(out))

    def met(self, allocatable: Mapping[str, str], gpus: int | None) -> bool:
        """Whether ``allocatable`` holds one GPU model's devices on every GPU (``gpus`` None: a
        positive multiple of one GPU's)."""
        for counts in self.per_gpu:
            seen = {r: _count(allocatable, r) for r in counts}
            if gpus is not None and all(seen[r] == n * gpus for r, n in counts.items()):
                return True
            if gpus is None and (multiple := _same_multiple(seen, counts)) is not None and multiple > 0:
                return True
        return False

    def words(self, gpus: int | None) -> str:
        shown = [
            ", ".join(
                f"{r}: {n * gpus if gpus is not None else f'{n} per GPU'}" for r, n in sorted(m.items())
            )
            for m in self.per_gpu
        ]
        return " or ".join(shown)


def _count(allocatable: Mapping[str, str], resource: str) -> int:
    return quantity_int(allocatable.get(resource)) or 0


def _same_multiple(seen: Mapping[str, int], counts: Mapping[str, int]) -> int | None:
    ratios = {seen[r] // n if seen[r] % n == 0 else -1 for r, n in counts.items()}
    return ratios.pop() if len(ratios) == 1 else None


#: What a node advertises under each pair of a MIG config name and a plugin config name (the slices'
#: time-slicing is the plugin's) that gpushare has seen a pool declare.
_SEEN: dict[tuple[str, str], Expected] = {}


def _expected(mode: str, labels: Mapping[str, str]) -> Expected | None:
    return _SEEN.get((mode, labels.get(c.LABEL_NVIDIA_CONFIG, "")))


def _mig(spec: GPUSharePoolSpec) -> Mig:
    if spec.nvidia is None or spec.nvidia.mig is None:
        raise ValueError("not a MIG pool: spec.nvidia.mig is absent")
    return spec.nvidia.mig


def _record(annotations: Mapping[str, str]) -> migstate.MigSwitch | None:
    return migstate.MigSwitch.parse(annotations.get(migstate.ANNOTATION_MIG_SWITCH))


def _state_written(label_times: Mapping[str, datetime] | None) -> datetime | None:
    """When a field manager other than gpushare's last wrote the MIG manager's state label."""
    return (label_times or {}).get(c.LABEL_MIG_CONFIG_STATE)


def _seen_working(record: migstate.MigSwitch, label_times: Mapping[str, datetime] | None) -> bool:
    return record.seen_working or migstate.written_after(record, _state_written(label_times))


def _mig_devices(allocatable: Mapping[str, str]) -> str:
    shown = [f"{r}: {v}" for r, v in sorted(allocatable.items()) if r.startswith(c.RES_NVIDIA_MIG_PREFIX)]
    whole = allocatable.get(c.RES_NVIDIA_GPU)
    if whole is not None:
        shown.insert(0, f"{c.RES_NVIDIA_GPU}: {whole}")
    return ", ".join(shown) if shown else "no NVIDIA GPU"


class MigBackend(NvidiaBackend):
    """MIG pools: the geometry label and the plugin's config label (module docstring)."""

    name: str = "nvidia-mig"
    owned_labels: tuple[str, ...] = (c.LABEL_NVIDIA_CONFIG, c.LABEL_MIG_CONFIG)
    mode_label: str = c.LABEL_MIG_CONFIG
    node_resources: tuple[str, ...] = (c.RES_NVIDIA_GPU, c.RES_NVIDIA_MIG_PREFIX)
    pod_resources: tuple[str, ...] = (c.RES_NVIDIA_GPU, c.RES_NVIDIA_MIG_PREFIX)
    pool_words: str = "an NVIDIA MIG pool"
    switch_reasons: tuple[str, ...] = (migstate.FAILED_REASON, migstate.STUCK, migstate.OPERANDS_PAUSED)
    timed_labels: tuple[str, ...] = (c.LABEL_MIG_CONFIG_STATE,)

    def spec_problem(self, spec: GPUSharePoolSpec) -> str | None:
        return None

    def labels_for(self, spec: GPUSharePoolSpec) -> dict[str, str]:
        assert spec.nvidia is not None
        return {c.LABEL_NVIDIA_CONFIG: config.name_of(spec.nvidia), c.LABEL_MIG_CONFIG: self.pool_mode(spec)}

    def pool_mode(self, spec: GPUSharePoolSpec) -> str:
        mig = _mig(spec)
        name = migconfig.name_of(mig)
        assert spec.nvidia is not None
        key = (name, config.name_of(spec.nvidia))
        if mig.geometry is not None and key not in _SEEN:
            _SEEN[key] = Expected.of(mig)
        return name

    def restored(self, prior: Mapping[str, str | None]) -> dict[str, str | None]:
        """The plugin's config label as it was; the MIG config as it was, or NVIDIA's default
        ``all-disabled`` where there was none (a label removed would leave the slices in place)."""
        return {
            c.LABEL_NVIDIA_CONFIG: prior.get(c.LABEL_NVIDIA_CONFIG),
            c.LABEL_MIG_CONFIG: prior.get(c.LABEL_MIG_CONFIG) or migconfig.ALL_DISABLED,
        }

    def mode_of(self, labels: Mapping[str, str | None]) -> str:
        return labels.get(c.LABEL_MIG_CONFIG) or ""

    def disrupts(self, old_mode: str, new_mode: str) -> bool:
        """Any other geometry: the MIG manager destroys every GPU instance to apply it."""
        return old_mode != new_mode

    def holds_shared_gpu(self, requests: Mapping[str, int]) -> bool:
        return super().holds_shared_gpu(requests) or any(
            k.startswith(c.RES_NVIDIA_MIG_PREFIX) and v > 0 for k, v in requests.items()
        )

    def _devices(self, mode: str, allocatable: Mapping[str, str], labels: Mapping[str, str]) -> bool:
        """``success`` for ``mode`` and the geometry's devices, whenever that success came."""
        if labels.get(c.LABEL_MIG_CONFIG) != mode or labels.get(c.LABEL_MIG_CONFIG_STATE) != migstate.SUCCESS:
            return False
        expected = _expected(mode, labels)
        if expected is not None:
            return expected.met(allocatable, physical_gpus(labels))
        # A config gpushare did not write (a pool's ``mig.config``, a node's own one given back):
        # its devices are not known here, and the plugin's config with it may be the node's own.
        return any(
            _count(allocatable, r) > 0
            for r in allocatable
            if r == c.RES_NVIDIA_GPU or r.startswith(c.RES_NVIDIA_MIG_PREFIX)
        )

    def advertises(
        self,
        mode: str,
        allocatable: Mapping[str, str],
        labels: Mapping[str, str],
        annotations: Mapping[str, str] | None = None,
        label_times: Mapping[str, datetime] | None = None,
    ) -> bool:
        """``success`` for ``mode`` and the geometry's devices (module docstring); for a switch to
        ``mode`` gpushare made (its record in ``annotations``), only once the MIG manager was seen
        working on it or wrote the state after the record (``label_times``): never the previous
        config's ``success``."""
        if not self._devices(mode, allocatable, labels):
            return False
        record = _record(annotations or {})
        return record is None or record.config != mode or _seen_working(record, label_times)

    def switch_annotations(
        self,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        label_patch: Mapping[str, str | None],
        now: str,
        *,
        staying: bool,
    ) -> dict[str, str | None]:
        """gpushare's record of the switch (:class:`~gpushare.backends.nvidia.migstate.MigSwitch`)
        with a new ``nvidia.com/mig.config``; dropped when the node leaves the pool."""
        key = migstate.ANNOTATION_MIG_SWITCH
        if not staying:
            return {key: None} if key in annotations else {}
        new = label_patch.get(c.LABEL_MIG_CONFIG)
        if not new or new == labels.get(c.LABEL_MIG_CONFIG):
            return {}
        since = datetime.fromisoformat(now.replace("Z", "+00:00"))
        return {key: migstate.MigSwitch(new, since).dump()}

    def switch_seen(
        self,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        label_times: Mapping[str, datetime] | None = None,
    ) -> dict[str, str] | None:
        """The record marked ``seenWorking`` once the MIG manager reports ``pending`` or
        ``rebooting`` for the config gpushare wrote, or wrote the state after the record
        (``label_times``, whatever the state): its ``success`` after that is the new one's."""
        record = _record(annotations)
        if record is None or record.seen_working or record.config != labels.get(c.LABEL_MIG_CONFIG):
            return None
        if labels.get(c.LABEL_MIG_CONFIG_STATE) not in migstate.WORKING and not _seen_working(
            record, label_times
        ):
            return None
        return {migstate.ANNOTATION_MIG_SWITCH: replace(record, seen_working=True).dump()}

    def switch_state(
        self,
        mode: str,
        allocatable: Mapping[str, str],
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        *,
        now: datetime,
        timeout_s: int,
        label_times: Mapping[str, datetime] | None = None,
    ) -> tuple[NodePhaseName, str, str] | None:
        """Where a switch gpushare made to ``mode`` stands (:func:`migstate.progress`): Restarting
        while the manager works (or has not started), Failed for ``failed``, a state stuck past
        ``timeout_s`` or operands left paused; None once confirmed, or when gpushare has no record
        of switching the node to ``mode`` (the device plugin's evidence says then, as when the
        manager applied the config but the node does not advertise its devices in time)."""
        record = _record(annotations)
        if record is None or record.config != mode or labels.get(c.LABEL_MIG_CONFIG) != mode:
            return None
        found = migstate.progress(
            mode,
            labels,
            self._devices(mode, allocatable, labels),
            record,
            now,
            timedelta(seconds=timeout_s),
            _state_written(label_times),
        )
        if found.confirmed or found.reason == migstate.NOT_ADVERTISED:
            return None
        return ("Failed" if found.failed else "Restarting"), found.reason, found.message

    def plugin_unregistered(self, capacity: Mapping[str, str], allocatable: Mapping[str, str]) -> bool:
        return False

    def _wants(self, mode: str, labels: Mapping[str, str]) -> str:
        expected = _expected(mode, labels)
        return expected.words(physical_gpus(labels)) if expected is not None else "its MIG devices"

    def stale_message(self, mode: str, allocatable: Mapping[str, str], labels: Mapping[str, str]) -> str:
        state = labels.get(c.LABEL_MIG_CONFIG_STATE) or "none"
        return (
            f"labelled {c.LABEL_MIG_CONFIG}={mode}, which means {self._wants(mode, labels)}; "
            f"{c.LABEL_MIG_CONFIG_STATE} is {state} and the node advertises {_mig_devices(allocatable)}"
        )

    def pending_message(self, mode: str, allocatable: Mapping[str, str], labels: Mapping[str, str]) -> str:
        state = labels.get(c.LABEL_MIG_CONFIG_STATE) or "none"
        return (
            f"waiting for NVIDIA's MIG manager to apply {c.LABEL_MIG_CONFIG}={mode} "
            f"({c.LABEL_MIG_CONFIG_STATE}={state}) and the node to advertise {self._wants(mode, labels)}; "
            f"it advertises {_mig_devices(allocatable)}"
        )

    def advertised(self, allocatable: Mapping[str, str]) -> str:
        return _mig_devices(allocatable)

    # --- counted per profile (gpushare.backends.nvidia.migfit): inspect, advise, demand, lending

    def resource_list(self, spec: GPUSharePoolSpec, totals: Mapping[str, int]) -> dict[str, str]:
        """Each resource the geometry offers, and any other device the nodes advertise or pods hold
        (``nvidia.com/gpu: 0`` when there is none)."""
        names = set(migfit.resources(spec)) | {r for r, n in totals.items() if n > 0 and migfit.is_device(r)}
        return {r: str(totals.get(r, 0)) for r in sorted(names or {c.RES_NVIDIA_GPU})}

    def demand_resources(self, spec: GPUSharePoolSpec) -> tuple[str, ...]:
        """The devices the geometry offers, per profile (none known for a named config)."""
        return migfit.resources(spec)

    def describe_requests(self, spec: GPUSharePoolSpec, requests: Mapping[str, int]) -> str:
        return migfit.describe(requests)

    def room(
        self,
        borrower: GPUSharePoolSpec,
        lender: GPUSharePoolSpec,
        allocatable: Mapping[str, str],
        labels: Mapping[str, str],
        gpus: int,
        loan: GpuSize | None,
    ) -> list[tuple[int, int]]:
        """One entry per device the geometry offers: its count on the node's GPUs (a lent node:
        its loan's GPUs)."""
        return migfit.room(borrower, loan.gpus if loan is not None and loan.gpus > 0 else gpus)

    def fit_problem(
        self, pool: str, spec: GPUSharePoolSpec, requests: Mapping[str, int], gpus: int
    ) -> str | None:
        return migfit.fit_problem(pool, spec, requests)

    def take(
        self, spec: GPUSharePoolSpec, requests: Mapping[str, int], gpus: int
    ) -> tuple[int, tuple[int, int]]:
        entries = migfit.take_on(spec, requests)
        return len(entries), next(iter(entries.values()), (0, 0))

    def entry_resources(self, spec: GPUSharePoolSpec) -> tuple[str, ...]:
        return migfit.resources(spec)

    def take_on(
        self, spec: GPUSharePoolSpec, requests: Mapping[str, int]
    ) -> Mapping[int, tuple[int, int]] | None:
        return migfit.take_on(spec, requests)

    def describe_take(self, spec: GPUSharePoolSpec, entries: Mapping[int, tuple[int, int]]) -> str:
        names = migfit.resources(spec)
        return migfit.describe({names[i]: n for i, (n, _) in entries.items() if i < len(names)})

    def devices(self, allocatable: Mapping[str, str]) -> dict[str, int]:
        return migfit.devices(allocatable)

    def pod_devices(self, requests: Mapping[str, int]) -> dict[str, int]:
        return migfit.pod_devices(requests)


MIG: Final = MigBackend()
