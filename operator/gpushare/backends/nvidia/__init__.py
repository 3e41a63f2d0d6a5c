"""NVIDIA's device plugin (k8s-device-plugin): time-slicing and MPS pools, the second backend; MIG
pools (NVIDIA's MIG manager beside the plugin) the third (``gpushare.backends.nvidia.mig``).

NVIDIA's plugin reads one sharing config; several named configs live in one ConfigMap that its
pods mount, and the node label ``nvidia.com/device-plugin.config`` picks one per node. Its
``config-manager`` sidecar links the picked config and signals the plugin when the label's value
changes, so the plugin is never restarted by the operator (``restarts_plugin`` is False): the
operator writes the label and waits for the node to advertise ``replicas x GPUs``.

A pool's config is named after its content (``gpushare.backends.nvidia.config``): an edited config
is a new name, so it reaches the node as a new label value (config-manager acts only on a change of
value). The mode of a node is that name; what it means (strategy, replicas, resource) is read back
from the name itself.
"""

from gpushare.backends.nvidia.backend import NVIDIA, NvidiaBackend, describe, physical_gpus
from gpushare.backends.nvidia.mig import MIG, MigBackend

__all__ = ["MIG", "NVIDIA", "MigBackend", "NvidiaBackend", "describe", "physical_gpus"]
