"""A pool's NVIDIA plugin config: its document (the ConfigMap value) and its name (the key, and
the node label's value), named after the content.

The name reads ``gpushare-<strategy><replicas>[-shared]-<hash>``, e.g. ``gpushare-ts4-1f2e3d4c``:
the strategy (``ts`` time-slicing, ``mps``, ``none``, ``mig``: replicas 1, the slices' own
time-slicing inside the document), the replicas, ``-shared`` with
renameByDefault, and 8 hex digits of the SHA-256 of the document. Any edit of the config changes
the hash, so it reaches the nodes as a new label value; the rest lets the name be read back without
the ConfigMap (what a node advertises, whether a switch disrupts its pods).
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from typing import Any

import yaml

from gpushare import constants as c
from gpushare.api.v1alpha1 import Nvidia

#: Every name gpushare gives a config.
PREFIX = "gpushare-"
_STRATEGY_TAG = {"TimeSlicing": "ts", "MPS": "mps", "None": "none", "MIG": "mig"}
_NAME_RE = re.compile(rf"^{PREFIX}(ts|mps|none|mig)([0-9]+)(-shared)?-([0-9a-f]{{8}})$")


def _mig_sharing(n: Nvidia) -> dict[str, Any]:
    """A MIG pool's plugin config: the MIG strategy, and the time-slicing of its profiles."""
    assert n.mig is not None
    body: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": n.mig.strategy}}
    if n.mig.time_slicing:
        single = n.mig.strategy == "single"
        resources = [
            {
                "name": c.RES_NVIDIA_GPU if single else c.RES_NVIDIA_MIG_PREFIX + t.profile,
                "replicas": t.replicas,
            }
            for t in sorted(n.mig.time_slicing, key=lambda t: t.profile)
        ]
        body["sharing"] = {
            "timeSlicing": {
                "failRequestsGreaterThanOne": n.fail_requests_greater_than_one,
                "resources": resources,
            }
        }
    return body


def document(n: Nvidia) -> str:
    """The plugin config (YAML, ``version: v1``) of a pool's ``spec.nvidia``. Flags are left to
    the plugin's own command line; only ``sharing`` is set (and, for MIG, ``flags.migStrategy``)."""
    if n.strategy == "MIG":
        return yaml.safe_dump(_mig_sharing(n), sort_keys=False)
    body: dict[str, Any] = {"version": "v1"}
    resource: dict[str, Any] = {"name": c.RES_NVIDIA_GPU, "replicas": n.replicas}
    if n.strategy == "TimeSlicing":
        body["sharing"] = {
            "timeSlicing": {
                "renameByDefault": n.rename_by_default,
                "failRequestsGreaterThanOne": n.fail_requests_greater_than_one,
                "resources": [resource],
            }
        }
    elif n.strategy == "MPS":
        body["sharing"] = {"mps": {"renameByDefault": n.rename_by_default, "resources": [resource]}}
    return yaml.safe_dump(body, sort_keys=False)


@functools.lru_cache(maxsize=256)
def name_of(n: Nvidia) -> str:
    """The config's name: see the module docstring."""
    digest = hashlib.sha256(document(n).encode()).hexdigest()[:8]
    shared = "-shared" if n.rename_by_default and n.strategy not in ("None", "MIG") else ""
    return f"{PREFIX}{_STRATEGY_TAG[n.strategy]}{n.replicas}{shared}-{digest}"


@dataclass(frozen=True)
class ConfigName:
    """What a config's name says."""

    strategy: str
    replicas: int
    renamed: bool

    @property
    def resource(self) -> str:
        return c.RES_NVIDIA_GPU_SHARED if self.renamed else c.RES_NVIDIA_GPU

    @classmethod
    def parse(cls, name: str | None) -> ConfigName | None:
        """None for a name gpushare did not give."""
        m = _NAME_RE.match(name or "")
        if m is None:
            return None
        strategy = {v: k for k, v in _STRATEGY_TAG.items()}[m.group(1)]
        return cls(strategy, int(m.group(2)), m.group(3) is not None)


def owned(name: str) -> bool:
    """Whether gpushare named this config (its key in the ConfigMap is gpushare's)."""
    return _NAME_RE.match(name) is not None
