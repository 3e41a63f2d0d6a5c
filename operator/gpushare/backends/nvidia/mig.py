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
previous config's ``success``) comes with the previous geometry's devices, which are not the new
one's, so it is not taken; :mod:`gpushare.backends.nvidia.migstate` is the stricter reading
(gpushare's own record of having seen the manager work), not wired yet.

What a node advertises is known once a pool with its two labels' values was seen
(:meth:`MigBackend.labels_for`, :meth:`MigBackend.pool_mode`): each name is a digest of its
content, so the pair stands for one geometry and one time-slicing only. For a config gpushare
did not write (a pool naming an existing config, ``mig.config``; a node's own config given back
when it leaves), only some NVIDIA GPU device advertised is required: right after gpushare writes
such a label, the previous config's ``success`` is taken (the stricter reading fixes that).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from gpushare import constants as c
from gpushare.api.quantity import quantity_int
from gpushare.api.v1alpha1 import GPUSharePoolSpec, Mig
from gpushare.backends.base import GpuSize
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

    def advertises(self, mode: str, allocatable: Mapping[str, str], labels: Mapping[str, str]) -> bool:
        """``success`` for ``mode`` and the geometry's devices (module docstring)."""
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
