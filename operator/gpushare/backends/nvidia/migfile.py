"""gpushare's MIG configs as entries of the one file NVIDIA's MIG manager reads (pure).

NVIDIA's MIG manager reads exactly one file: ``nvidia-mig-manager`` runs ``reconfigure-mig.sh -f
$CONFIG_FILE``, which asserts and applies the config a node's ``nvidia.com/mig.config`` names from
that file alone (``nvidia-mig-parted assert --valid-config -f $CONFIG_FILE -c <name>``). The GPU
Operator mounts its ConfigMap (ClusterPolicy ``migManager.config.name``) and sets ``CONFIG_FILE`` to
its ``config.yaml`` key, so a config under any other key would never be seen. gpushare therefore
keeps each MIG config as one entry of the ``mig-configs`` map of the ``config.yaml`` document; every
other entry, the ``version`` and any other field of the document are kept (PyYAML keeps no
comments: the document is rewritten only when gpushare's entries change).

The ownership and retention rules of :mod:`gpushare.backends.nvidia.configmap` apply unchanged,
entry by entry: :func:`view` shows the ConfigMap as one key per entry (each the one-config document
:func:`gpushare.backends.nvidia.migconfig.document` renders, so that equal text means equal entry),
and :func:`unview` turns the plan's patch of those keys back into a patch of ``config.yaml``
(with the same metadata: the write still goes only onto the version read).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from gpushare.backends.nvidia.configmap import LayoutError

#: The one key of the MIG manager's ConfigMap that it reads (the GPU Operator's ``CONFIG_FILE``).
CONFIG_KEY = "config.yaml"


def _where(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"ConfigMap {meta.get('namespace', '')}/{meta.get('name', '')}"


def _document(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The ``config.yaml`` document as read; LayoutError when it is not a mig-parted file."""
    text = (obj.get("data") or {}).get(CONFIG_KEY)
    why = None
    body: Any = None
    if text is None:
        why = f"has no key {CONFIG_KEY}"
    else:
        try:
            body = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            why = f"has a {CONFIG_KEY} that is not YAML ({str(exc).splitlines()[0]})"
        else:
            if not isinstance(body, dict) or not isinstance(body.get("mig-configs"), dict):
                why = f"has a {CONFIG_KEY} that is not a mig-parted file (version: v1, mig-configs: {{...}})"
    if why is not None:
        raise LayoutError(
            f"{_where(obj)} {why}; NVIDIA's MIG manager reads only its {CONFIG_KEY}, where gpushare "
            "adds its MIG configs: create that ConfigMap with a mig-parted config.yaml (the GPU "
            "Operator's custom MIG config), name it in ClusterPolicy migManager.config.name and in "
            "the pool's spec.nvidia.mig.configMap"
        )
    return dict(body)


def entry_document(name: str, entries: Any) -> str:
    """One entry as a mig-parted file of that one config (as ``migconfig.document`` renders it)."""
    return yaml.safe_dump({"version": "v1", "mig-configs": {name: entries}}, sort_keys=False)


def view(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The ConfigMap ``obj`` as one key per entry of its ``config.yaml`` (metadata as read)."""
    configs = _document(obj)["mig-configs"]
    data = {str(name): entry_document(str(name), entries) for name, entries in configs.items()}
    return {"metadata": obj.get("metadata") or {}, "data": data}


def unview(obj: Mapping[str, Any], patch: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """A patch of the view of ``obj`` (``data: {name: document | None}``) as a patch of the
    ConfigMap: ``config.yaml`` with those entries added, replaced or deleted, everything else of
    the document kept; the patch's metadata as it is. ``config.yaml`` is left alone when no entry
    changes."""
    if patch is None:
        return None
    changes: Mapping[str, str | None] = patch.get("data") or {}
    out: dict[str, Any] = {k: v for k, v in patch.items() if k != "data"}
    if not changes:
        return out
    body = _document(obj)
    configs = dict(body["mig-configs"])
    for name, document in changes.items():
        if document is None:
            configs.pop(name, None)
        else:
            configs[name] = yaml.safe_load(document)["mig-configs"][name]
    if configs == body["mig-configs"]:
        return out
    out["data"] = {CONFIG_KEY: yaml.safe_dump({**body, "mig-configs": configs}, sort_keys=False)}
    return out
