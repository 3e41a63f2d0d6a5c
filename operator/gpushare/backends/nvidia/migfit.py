"""A MIG pool's devices counted per profile: what ``gpushare inspect``, ``gpushare advise``, the
demand (``status.demand``), lending and the pool's ``status.capacity`` count of its nodes (pure).

A MIG device is taken whole by a pod (or by one of a time-sliced profile's replicas), so a node's
MIG room is a count per resource: ``nvidia.com/mig-<profile>`` under the mixed strategy,
``nvidia.com/gpu`` under single (the slices advertised as GPUs). What a pool's geometry gives a
node (:func:`offered`) is its devices per GPU x the node's physical GPUs x each profile's
replicas; with one entry per GPU model (``deviceFilter``) the fewest of each resource over the
entries (the node's model is the MIG manager's to match, not known here). A pool naming an existing
config (``mig.config``) offers what is unknown here: its room is unknown, as its demand resources.

The fit model's room (``SharingBackend.room``) holds one entry per resource of
:func:`resources`, in that order: what a pod takes is then the entries of the resources it asks
for (:func:`take_on`).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpushare import constants as c
from gpushare.api.quantity import quantity_int
from gpushare.api.v1alpha1 import GPUSharePoolSpec, Mig


def _mig(spec: GPUSharePoolSpec) -> Mig | None:
    return spec.nvidia.mig if spec.nvidia is not None else None


def is_device(resource: str) -> bool:
    """Whether a resource is one of NVIDIA's devices a MIG node advertises (a slice, or a GPU)."""
    return resource == c.RES_NVIDIA_GPU or resource.startswith(c.RES_NVIDIA_MIG_PREFIX)


def per_gpu(mig: Mig) -> dict[str, int]:
    """The devices each GPU gives under the geometry, replicas included (the fewest of each over
    its entries; empty: a named config)."""
    entries: list[dict[str, int]] = []
    for g in mig.geometry or ():
        counts: dict[str, int] = {}
        for profile, n in g.profiles.items():
            resource = c.RES_NVIDIA_GPU if mig.strategy == "single" else c.RES_NVIDIA_MIG_PREFIX + profile
            counts[resource] = counts.get(resource, 0) + n * mig.replicas_of(profile)
        entries.append(counts)
    names = sorted({r for e in entries for r in e})
    return {r: min(e.get(r, 0) for e in entries) for r in names}


def resources(spec: GPUSharePoolSpec) -> tuple[str, ...]:
    """The resources the pool's geometry offers, sorted (empty: a named config, or no MIG)."""
    mig = _mig(spec)
    return tuple(sorted({r for r, n in per_gpu(mig).items() if n > 0})) if mig is not None else ()


def offered(spec: GPUSharePoolSpec, gpus: int) -> dict[str, int]:
    """What a node of ``gpus`` physical GPUs advertises once the pool's geometry is applied."""
    mig = _mig(spec)
    if mig is None or gpus <= 0:
        return {}
    counts = per_gpu(mig)
    return {r: counts[r] * gpus for r in resources(spec)}


def devices(allocatable: Mapping[str, str]) -> dict[str, int]:
    """What a node advertises of NVIDIA's devices, per resource (positive counts only)."""
    out = {r: quantity_int(v) or 0 for r, v in allocatable.items() if is_device(r)}
    return {r: n for r, n in sorted(out.items()) if n > 0}


def pod_devices(requests: Mapping[str, int]) -> dict[str, int]:
    """What a pod holds of NVIDIA's devices (its positive requests of them)."""
    return {r: n for r, n in sorted(requests.items()) if is_device(r) and n > 0}


def fit_problem(pool: str, spec: GPUSharePoolSpec, requests: Mapping[str, int]) -> str | None:
    """Why a pod can never take devices of the pool's nodes (None: it can, room permitting)."""
    wanted = pod_devices(requests)
    offers = resources(spec)
    if not offers:
        return f"pool {pool} names a MIG config whose profiles are not known here"
    if not wanted:
        return f"requests none of the devices pool {pool} offers ({', '.join(offers)})"
    missing = sorted(set(wanted) - set(offers))
    if missing:
        return f"requests {', '.join(missing)}, and pool {pool}'s geometry offers {', '.join(offers)}"
    return None


def room(spec: GPUSharePoolSpec, gpus: int) -> list[tuple[int, int]]:
    """The fit model's room of a node of ``gpus`` GPUs in the pool: one entry per resource of
    :func:`resources` (its count, no compute share); empty: unknown."""
    counts = offered(spec, gpus)
    return [(counts[r], 0) for r in resources(spec)] if counts else []


def take_on(spec: GPUSharePoolSpec, requests: Mapping[str, int]) -> dict[int, tuple[int, int]]:
    """The room's entries a pod takes: entry of each resource it asks for -> (its count, 0)."""
    order = resources(spec)
    return {order.index(r): (n, 0) for r, n in pod_devices(requests).items() if r in order}


def describe(counts: Mapping[str, int]) -> str:
    """``N nvidia.com/mig-<profile>, ...`` (``no MIG device`` when none)."""
    shown = [f"{n} {r}" for r, n in sorted(counts.items()) if n > 0]
    return ", ".join(shown) if shown else "no MIG device"
