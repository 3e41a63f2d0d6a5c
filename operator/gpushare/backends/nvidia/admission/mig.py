"""MIG pools in NVIDIA's admission rules (pure): what a MIG pool's nodes advertise, and its own rules.

What a node of a MIG pool advertises (the sources are cited above the records, in :mod:`.catalog`):
under the device plugin's mixed strategy one ``nvidia.com/mig-<profile>`` per device of the pool's
geometry, and ``nvidia.com/gpu`` for a GPU no geometry entry enables MIG on; under single, the
slices as ``nvidia.com/gpu``. Each device counts once per time-slicing replica of its profile.

* :func:`offers`: whether a MIG pool's nodes can advertise a resource (``may_offer`` of
  :mod:`.rules` asks it for a MIG pool);
* :func:`node_size`: the most of a resource one node of the pool has (``NVIDIA_EXCEEDS_NODE``);
* :func:`check_offers`: ``NVIDIA_MIG_PROFILE`` and ``NVIDIA_WHOLE_GPU_ON_MIG`` for a pod confined to
  MIG pools.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpushare import constants as c
from gpushare.api.v1alpha1 import GPUSharePool, Mig
from gpushare.backends.nvidia.admission.catalog import NVIDIA_MIG_PROFILE, NVIDIA_WHOLE_GPU_ON_MIG
from gpushare.rulekit.emit import Emitter, pool_verdict
from gpushare.rulekit.model import Context
from gpushare.rulekit.podspecs import ContainerRef, resource_field
from gpushare.rulekit.quantity import Amount

_MIG = c.RES_NVIDIA_MIG_PREFIX
_NV = c.RES_NVIDIA_GPU

#: A container's ask: (container, resource, limits|requests, amount).
Ask = tuple[ContainerRef, str, str, Amount]


def mig_of(pool: GPUSharePool | None) -> Mig | None:
    """The pool's MIG block (None: not a MIG pool)."""
    return pool.spec.nvidia.mig if pool is not None and pool.spec.nvidia is not None else None


def all_enabled(mig: Mig) -> bool:
    """Whether every GPU of the pool's nodes is MIG-enabled: a geometry with an entry for every GPU
    (no deviceFilter). A GPU that no entry's deviceFilter matches is left as it was by NVIDIA's MIG
    manager; a pool naming an existing config is not read here."""
    return mig.geometry is not None and any(not g.device_filter for g in mig.geometry)


def offers(mig: Mig, resource: str) -> bool:
    """Whether a MIG pool's nodes can advertise ``resource``: under single its slices as
    ``nvidia.com/gpu`` and no MIG device; under mixed a MIG device of a profile its geometry declares
    (any, for a named config), and ``nvidia.com/gpu`` unless every GPU is MIG-enabled."""
    if resource.startswith(_MIG):
        return mig.strategy == "mixed" and (
            mig.geometry is None or resource.removeprefix(_MIG) in mig.profiles()
        )
    if resource == _NV:
        return mig.strategy == "single" or not all_enabled(mig)
    return False


def resources(mig: Mig) -> tuple[str, ...]:
    """What a MIG pool's nodes advertise (:func:`offers`), in words for the messages."""
    if mig.strategy == "single":
        return (_NV,)
    devices = tuple(_MIG + p for p in mig.profiles()) if mig.geometry is not None else (_MIG + "<profile>",)
    return devices if all_enabled(mig) else (*devices, _NV)


def per_gpu(mig: Mig, resource: str) -> tuple[int, str] | None:
    """The most devices of ``resource`` one GPU has under the geometry (replicas included; the largest
    entry when there is one per GPU model), with the profile; None when the geometry does not say
    (a named config, or ``nvidia.com/gpu`` beside MIG devices)."""
    if mig.geometry is None:
        return None
    best: tuple[int, str] | None = None
    for g in mig.geometry:
        for profile, count in g.profiles.items():
            named = _NV if mig.strategy == "single" else _MIG + profile
            if named != resource:
                continue
            devices = count * mig.replicas_of(profile)
            if best is None or devices > best[0]:
                best = (devices, profile)
    if best is None and resource.startswith(_MIG):
        return 0, resource.removeprefix(_MIG)  # no GPU has the profile
    return best


def node_size(mig: Mig, resource: str, gpus: int | None) -> int | None:
    """The most of ``resource`` a node of ``gpus`` GPUs has once the geometry is applied (None: unknown)."""
    found = per_gpu(mig, resource)
    if found is None:
        return None
    if found[0] == 0:
        return 0
    return None if gpus is None else found[0] * gpus


def size_words(mig: Mig, resource: str, gpus: int) -> str:
    """How :func:`node_size` counts, in words: ``2 x 3g.20gb per GPU x 2 GPUs``."""
    devices, profile = per_gpu(mig, resource) or (0, "")
    replicas = mig.replicas_of(profile)
    count = devices // replicas
    sliced = f" x {replicas} time-slicing replicas" if replicas > 1 else ""
    return f"{count} x {profile} per GPU{sliced} x {gpus} GPU(s)"


def _offered(mig: Mig) -> str:
    if mig.strategy == "single":
        return ", ".join(mig.profiles())
    return ", ".join(_MIG + p for p in mig.profiles())


def check_offers(em: Emitter, asks: Sequence[Ask], pools: Sequence[GPUSharePool], ctx: Context) -> bool:
    """``NVIDIA_MIG_PROFILE`` and ``NVIDIA_WHOLE_GPU_ON_MIG`` for a pod confined to the MIG ``pools``:
    each container's MIG device or whole GPU that none of them offers (:func:`offers`). Whether any
    ask is not offered (the other targeting rules then say nothing of the pod), judged or not."""
    migs = [(p, m) for p in pools if (m := mig_of(p)) is not None]
    found = False
    for ref, resource, where, amount in asks:
        if not (resource == _NV or resource.startswith(_MIG)) or any(offers(m, resource) for _, m in migs):
            continue
        declared = [(p, m) for p, m in migs if m.geometry is not None]
        if resource == _NV:
            rule, case = NVIDIA_WHOLE_GPU_ON_MIG, "mixed"
        else:
            mixed = [(p, m) for p, m in declared if m.strategy == "mixed"]
            rule, case = NVIDIA_MIG_PROFILE, "profile" if mixed else "single"
            declared = mixed or declared
        if not declared:
            continue  # a named config's profiles are the MIG manager's ConfigMap's: not judged
        found = True
        verdict, note = pool_verdict(rule, ctx, {p.name for p, _ in migs}, False)
        if verdict is None:
            continue
        mig = declared[0][1]
        problem, fix = rule.text(
            case,
            resource=resource,
            pool=", ".join(p.name for p, _ in declared),
            offered=_offered(mig),
            profiles=", ".join(mig.profiles()),
            profile=resource.removeprefix(_MIG),
            example=_MIG + mig.profiles()[0],
            count=amount.shown,
        )
        em.add(
            rule,
            container=ref,
            field=f"{ref.path}.{resource_field(where, resource)}",
            value=amount.shown,
            problem=problem,
            fix=fix,
            verdict=verdict,
            note=note,
        )
    return found
