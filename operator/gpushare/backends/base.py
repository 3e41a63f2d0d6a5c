"""The seam between the operator and a GPU-sharing stack (:class:`SharingBackend`).

Everything above it (the planner, the pool status, the restart step, the reconciler) asks the
backend of a pool what to do, and names none of the stack's labels or resources itself:

* **labels**: which node labels the backend owns, their values for a pool's spec, and which of
  them its device plugin reads only when it starts (a change needs the plugin made to reread);
* **the mode a node is in**, as its labels say, and which label changes disrupt running GPU pods
  (a mode switch, guarded by ``rollout.modeSwitch``), and which pods they disrupt;
* **evidence**: whether a node advertises what its labels ask for (its allocatable), and the words
  for what it advertises instead;
* **the device plugin**: where its pods live by default and the labels they carry.

A backend is pure: no client, no clock. ``gpushare.backends.ack`` is the first (Alibaba ACK's
cGPU and GPU sharing), ``gpushare.backends.nvidia`` the second (NVIDIA's device plugin:
time-slicing and MPS).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from gpushare.api.v1alpha1 import GPUSharePoolSpec


class SharingBackend(Protocol):
    """One GPU-sharing stack, as the operator drives it (see the module docstring)."""

    #: The backend's name: the ``backend`` label of the metrics, the pool status' wording.
    name: str
    #: Node labels the backend owns: written on a pool's nodes, their prior values restored.
    owned_labels: tuple[str, ...]
    #: Those its device plugin reads: changing one owes a plugin restart (or reload).
    plugin_labels: tuple[str, ...]
    #: Whether the operator restarts the plugin (deletes its pod) after such a change; False: the
    #: plugin reloads itself, and the operator only waits for the node to advertise the new mode.
    restarts_plugin: bool
    #: The label that names a node's mode (in messages: "<label> a -> b is blocked by ...").
    mode_label: str
    #: The resource a mode switch disrupts (in messages: "... pod(s) using <resource>").
    shared_resource: str
    #: Allocatable and capacity kept on node views (prefixes): what the evidence reads.
    node_resources: tuple[str, ...]
    #: Where the device plugin runs unless a pool says otherwise, and its pods' labels.
    default_plugin_namespace: str
    default_plugin_labels: Mapping[str, str]

    #: The resources a pool's ``status.capacity`` and ``status.allocated`` sum up.
    status_resources: tuple[str, ...]

    def demand_resources(self, spec: GPUSharePoolSpec) -> tuple[str, ...]:
        """The resources a pool's ``status.demand.requests`` sums over its waiting pods."""
        ...

    def asks_for(self, requests: Mapping[str, int]) -> bool:
        """Whether a waiting pod with these (effective) requests is demand for this backend's pools."""
        ...

    def resource_list(self, spec: GPUSharePoolSpec, totals: Mapping[str, int]) -> dict[str, str]:
        """``status.capacity`` / ``status.allocated`` from the totals of ``status_resources``: a
        resource list (name → quantity), as a node's ``status.allocatable``."""
        ...

    def labels_for(self, spec: GPUSharePoolSpec) -> dict[str, str]:
        """The owned labels' values on a node of a pool with this spec (every owned label)."""
        ...

    def pool_mode(self, spec: GPUSharePoolSpec) -> str:
        """The mode a node of a pool with this spec is in (``mode_of(labels_for(spec))``)."""
        ...

    def restored(self, prior: Mapping[str, str | None]) -> dict[str, str | None]:
        """The owned labels once a node leaves its pool, from their values before it joined
        (None: absent)."""
        ...

    def mode_of(self, labels: Mapping[str, str | None]) -> str:
        """The mode a node with these labels is in (or will be once its plugin rereads them)."""
        ...

    def disrupts(self, old_mode: str, new_mode: str) -> bool:
        """Whether moving a node from ``old_mode`` to ``new_mode`` disrupts its running GPU pods."""
        ...

    def holds_shared_gpu(self, requests: Mapping[str, int]) -> bool:
        """Whether a pod with these requests holds what a mode switch takes away."""
        ...

    def advertises(self, mode: str, allocatable: Mapping[str, str], labels: Mapping[str, str]) -> bool:
        """Whether a node with this allocatable (and labels) advertises what ``mode`` implies."""
        ...

    def plugin_unregistered(self, capacity: Mapping[str, str], allocatable: Mapping[str, str]) -> bool:
        """Whether the kubelet knows the plugin's resources but none is allocatable (unregistered)."""
        ...

    def unregistered_message(self, capacity: Mapping[str, str]) -> str: ...

    def stale_message(self, mode: str, allocatable: Mapping[str, str], labels: Mapping[str, str]) -> str:
        """Why a node labelled for ``mode`` does not advertise it (for the pool's node status)."""
        ...

    def pending_message(self, mode: str, allocatable: Mapping[str, str], labels: Mapping[str, str]) -> str:
        """What a node whose plugin was restarted waits for (for the pool's node status)."""
        ...
