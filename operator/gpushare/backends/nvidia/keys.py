"""The ConfigMap keys an NVIDIA pool needs, and the node label that names each (pure).

Every NVIDIA pool needs its device plugin config under its own key of the plugin's ConfigMap
(:mod:`gpushare.backends.nvidia.config`), named by ``nvidia.com/device-plugin.config``. A MIG pool
declaring a geometry also needs its mig-parted config (:mod:`gpushare.backends.nvidia.migconfig`),
named by ``nvidia.com/mig.config``, as an entry of the ``config.yaml`` file of the MIG manager's
ConfigMap, the one file the manager reads (:mod:`gpushare.backends.nvidia.migfile`); a MIG pool
naming an existing config (``mig.config``) needs no entry of gpushare's there. Each config is kept,
held back from node labels until ready, and collected the same way
(:mod:`gpushare.backends.nvidia.configmap`), through the key's ``view``/``unview``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from gpushare import constants as c
from gpushare.api.v1alpha1 import Nvidia
from gpushare.backends.nvidia import config, migconfig, migfile
from gpushare.backends.nvidia.configmap import as_keys, keys_patch


@dataclass(frozen=True)
class ConfigKey:
    """One key a pool needs: in which ConfigMap, its name and document, how long until the pods
    that read it see it, and the node label that names it."""

    namespace: str
    configmap: str
    name: str
    document: str
    propagation: timedelta
    label: str
    #: Whose mounted copy it must reach ("the device plugin pods'").
    readers: str
    #: What to do when the ConfigMap does not exist.
    missing: str
    #: The ConfigMap as one key per config, as the plan reads it (raises
    #: ``configmap.LayoutError`` when it cannot be read so), and the plan's patch of that view as
    #: a patch of the ConfigMap (the MIG manager's: entries of its one file ``config.yaml``).
    view: Callable[[Mapping[str, Any]], Mapping[str, Any]] = as_keys
    unview: Callable[[Mapping[str, Any], Mapping[str, Any] | None], Mapping[str, Any] | None] = keys_patch

    @property
    def where(self) -> str:
        return f"ConfigMap {self.namespace}/{self.configmap}"


def config_keys(n: Nvidia) -> tuple[ConfigKey, ...]:
    """The keys a pool with ``spec.nvidia`` = ``n`` needs, the plugin's first."""
    propagation = timedelta(seconds=n.config_propagation_seconds)
    cm = n.config_map
    keys = [
        ConfigKey(
            cm.namespace,
            cm.name,
            config.name_of(n),
            config.document(n),
            propagation,
            c.LABEL_NVIDIA_CONFIG,
            "the device plugin pods'",
            "create it (NVIDIA's chart: config.name) or point spec.nvidia.configMap at the one the "
            "device plugin mounts",
        )
    ]
    if n.mig is not None and n.mig.geometry is not None:
        mcm = n.mig.config_map
        keys.append(
            ConfigKey(
                mcm.namespace,
                mcm.name,
                migconfig.name_of(n.mig),
                migconfig.document(n.mig),
                propagation,
                c.LABEL_MIG_CONFIG,
                "the MIG manager's",
                "create it with a mig-parted config.yaml (NVIDIA's GPU Operator: a custom MIG config "
                "named in ClusterPolicy migManager.config.name) or point spec.nvidia.mig.configMap at "
                "the one the MIG manager reads",
                migfile.view,
                migfile.unview,
            )
        )
    return tuple(keys)
