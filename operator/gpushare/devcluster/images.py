"""Container images without a registry or a Docker engine: one static binary (or a whole root
filesystem, :func:`pack_layer`) -> a docker-archive tar.

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
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

_DIRS = ("dev", "etc", "proc", "sys", "tmp", "var", "var/run")


def _layer(files: Mapping[str, Path], links: Mapping[str, str]) -> bytes:
    """One uncompressed layer: the runtime's mount points, ``links`` and ``files`` (path in the
    image -> file here, mode 0755), parent directories included, in a fixed order."""
    buf = io.BytesIO()
    dirs = set(_DIRS)
    for path in files:
        parts = path.split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in sorted(dirs):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        for link, target in sorted(links.items()):
            info = tarfile.TarInfo(link)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
        for path, source in sorted(files.items()):
            data = source.read_bytes()
            info = tarfile.TarInfo(path)
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
    return build_files_image(
        ref, {name: binary}, out, entrypoint=entrypoint or [f"/{name}"], env=["PATH=/"], links=links
    )


def build_files_image(
    ref: str,
    files: Mapping[str, Path],
    out: Path,
    *,
    entrypoint: list[str],
    env: list[str],
    links: Mapping[str, str] | None = None,
) -> Path:
    """Write a docker-archive of image ``ref`` holding ``files`` (path in the image, without a
    leading ``/`` -> file here) to ``out``, e.g. a dynamically linked program with its libraries."""
    layer = _layer(files, links or {})
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": entrypoint, "Env": env, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [
            {"created_by": f"gpushare.devcluster.images: {', '.join('/' + f for f in sorted(files))}"}
        ],
    }
    return _archive(ref, config, io.BytesIO(layer), len(layer), diff_id, out)


def _archive(ref: str, config: dict[str, Any], layer: IO[bytes], size: int, diff_id: str, out: Path) -> Path:
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id.removeprefix("sha256:") + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [ref], "Layers": [layer_name]}]
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with tarfile.open(partial, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member, data in ((config_name, config_bytes), ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo(layer_name)
        info.size = size
        info.mode = 0o644
        tar.addfile(info, layer)
    partial.replace(out)
    return out


def pack_layer(
    ref: str,
    layer_tar: Path,
    out: Path,
    *,
    entrypoint: list[str],
    cmd: list[str],
    env: list[str],
    user: str,
    created_by: str,
) -> Path:
    """Write a docker-archive of image ``ref`` whose one layer is ``layer_tar`` (a root filesystem
    packed with ``tar``, e.g. by ``hack/build-image-local.sh``) to ``out``."""
    digest = hashlib.sha256()
    with layer_tar.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    diff_id = "sha256:" + digest.hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": entrypoint, "Cmd": cmd, "Env": env, "User": user, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": created_by}],
    }
    with layer_tar.open("rb") as f:
        return _archive(ref, config, f, layer_tar.stat().st_size, diff_id, out)
