"""A MIG pool's slices as NVIDIA's MIG manager reads them: a mig-parted config (pure).

The manager (github.com/NVIDIA/mig-parted) applies the config that a node's
``nvidia.com/mig.config`` label names, from a file of named configs (``version: v1``,
``mig-configs: {<name>: [<entry>, ...]}``; an entry: ``devices: all``, an optional
``device-filter`` of PCI device ids, ``mig-enabled: true`` and ``mig-devices: {<profile>: n}``).
gpushare writes the geometry a pool declares as one config, an entry of the ``mig-configs`` of
the manager's one file, the ``config.yaml`` key of its ConfigMap
(:mod:`gpushare.backends.nvidia.migfile`), named after the content
(``gpushare-mig-<8 hex digits of its SHA-256>``): an edited geometry is a new name, so it reaches
a node as a new label value, the only change the manager acts on.
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Any

import yaml

from gpushare.api.v1alpha1 import Mig, MigGeometry

#: Every name gpushare gives a MIG config.
PREFIX = "gpushare-mig-"
_NAME_RE = re.compile(rf"^{PREFIX}[0-9a-f]{{8}}$")
#: The config NVIDIA's MIG manager applies by default: MIG disabled on every GPU.
ALL_DISABLED = "all-disabled"


def _entry(g: MigGeometry) -> dict[str, Any]:
    entry: dict[str, Any] = {"devices": "all"}
    if g.device_filter:
        entry["device-filter"] = list(g.device_filter)
    entry["mig-enabled"] = True
    entry["mig-devices"] = dict(sorted(g.profiles.items()))
    return entry


def entries(mig: Mig) -> list[dict[str, Any]]:
    """The geometry as mig-parted's entries (empty for a pool naming an existing config)."""
    return [_entry(g) for g in mig.geometry or ()]


@functools.lru_cache(maxsize=256)
def name_of(mig: Mig) -> str:
    """The config's name (its entry in the file): the pool's own ``config``, or gpushare's name
    for its geometry."""
    if mig.config is not None:
        return mig.config
    body = yaml.safe_dump(entries(mig), sort_keys=True)
    return PREFIX + hashlib.sha256(body.encode()).hexdigest()[:8]


def document(mig: Mig) -> str:
    """The pool's geometry as a mig-parted file holding the one config :func:`name_of` (its entry
    of the manager's file, as :func:`gpushare.backends.nvidia.migfile.view` shows each entry)."""
    body = {"version": "v1", "mig-configs": {name_of(mig): entries(mig)}}
    return yaml.safe_dump(body, sort_keys=False)


def owned(name: str) -> bool:
    """Whether gpushare named this MIG config (its entry in the manager's file is gpushare's)."""
    return _NAME_RE.match(name) is not None


def profiles_in(document_text: str, name: str) -> dict[str, int] | None:
    """The profiles per GPU the config ``name`` of a mig-parted file declares, the most of each
    over its entries (None: the file does not hold the config, or cannot be read)."""
    try:
        body = yaml.safe_load(document_text)
    except yaml.YAMLError:
        return None
    configs = body.get("mig-configs") if isinstance(body, dict) else None
    found = configs.get(name) if isinstance(configs, dict) else None
    if not isinstance(found, list):
        return None
    out: dict[str, int] = {}
    for entry in found:
        devices = entry.get("mig-devices") if isinstance(entry, dict) else None
        for profile, count in (devices or {}).items() if isinstance(devices, dict) else ():
            if isinstance(count, int) and count > out.get(str(profile), 0):
                out[str(profile)] = count
    return out
