"""A pod's effective requests as Kubernetes' scheduler computes them (pure).

Kubernetes (``staging/src/k8s.io/component-helpers/resource/helpers.go``, ``PodRequests``; KEP-753,
"Exposing pod resource requirements"): the regular containers run together, so their requests add
up; a restartable (sidecar) init container, ``restartPolicy: Always``, keeps running beside them,
so it adds up too; a regular init container runs alone, after the sidecars declared before it have
started, so while it runs the pod holds its requests plus those sidecars'. The pod's request is the
larger of the running total and the peak of those init phases, per resource.

The planner (``gpushare.policy.views.pod_requests``) and the admission rules read requests through
this one function; each says how a container's requests are read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpushare.rulekit.podspecs import ContainerRef

#: A container's requests, as a caller reads them (resource name -> whole amount).
Reader = Callable[[Mapping[str, Any]], Mapping[str, int]]


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, 0) + value


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, value in other.items():
        into[name] = max(into.get(name, 0), value)


def _containers(spec: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    items = spec.get(key)
    return [c for c in items if isinstance(c, Mapping)] if isinstance(items, list) else []


def effective_requests(spec: Mapping[str, Any], read: Reader) -> dict[str, int]:
    """The pod spec's requests as the scheduler reserves them (see the module docstring)."""
    total: dict[str, int] = {}
    for container in _containers(spec, "containers"):
        _add(total, read(container))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in _containers(spec, "initContainers"):
        requests = read(container)
        if container.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
            phase = dict(sidecars)
        else:
            phase = dict(requests)
            _add(phase, sidecars)  # the sidecars declared before it run beside it
        _max(init_peak, phase)
    _max(total, init_peak)
    return total


def container_spec(containers: Sequence[ContainerRef]) -> dict[str, Any]:
    """A pod-like's containers (as the rules find them, in any workload kind) as a pod spec for
    :func:`effective_requests`: init containers in order, sidecars with ``restartPolicy: Always``,
    every other container running; ephemeral containers hold no resources and are left out."""

    def entry(ref: ContainerRef) -> dict[str, Any]:
        out: dict[str, Any] = {"resources": {"limits": ref.limits, "requests": ref.requests}}
        if ref.restart_always:
            out["restartPolicy"] = "Always"
        return out

    return {
        "containers": [entry(r) for r in containers if not r.init and r.label != "ephemeral container"],
        "initContainers": [entry(r) for r in containers if r.init],
    }
