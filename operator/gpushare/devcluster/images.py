"""Container images without a registry or a Docker engine: one static binary -> a docker-archive tar.

``containerd``'s ``ctr images import`` reads the archive (``manifest.json`` with ``RepoTags``, the
image config, one uncompressed layer). The layer holds the binary at ``/<name>`` and the empty
directories a runtime mounts over (``/proc``, ``/sys``, ``/dev``, ``/etc``, ``/tmp``, ``/var/run``).
Deterministic: the same binary gives the same image ID.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

_DIRS = ("dev", "etc", "proc", "sys", "tmp", "var", "var/run")


def _layer(binary: Path, name: str, links: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in _DIRS:
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        for link, target in sorted(links.items()):
            info = tarfile.TarInfo(link)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
        data = binary.read_bytes()
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def build_image(
    ref: str,
    binary: Path,
    out: Path,
    *,
    entrypoint: list[str] | None = None,
    links: dict[str, str] | None = None,
) -> Path:
    """Write a docker-archive of image ``ref`` whose entrypoint is ``/<binary name>`` to ``out``.

    ``links``: symlinks in the layer (path -> target), e.g. ``lib -> usr/lib`` so that a ``/usr``
    mounted from the host gives the container a dynamic loader and libc.
    """
    name = binary.name
    layer = _layer(binary, name, links or {})
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": entrypoint or [f"/{name}"],
            "Env": ["PATH=/"],
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": f"gpushare.devcluster.images: /{name}"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id.removeprefix("sha256:") + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [ref], "Layers": [layer_name]}]
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member, data in (
            (config_name, config_bytes),
            (layer_name, layer),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return out
