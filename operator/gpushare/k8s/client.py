"""Building a kubernetes_asyncio ApiClient from an explicit Configuration.

kubernetes_asyncio keeps a process-wide default Configuration and reads ``KUBECONFIG``
when the module is imported. Neither is used here: each client gets its own
Configuration, filled from the in-cluster service account (when running in a pod and
no kubeconfig is given) or from a kubeconfig file chosen at call time.
"""

from __future__ import annotations

import asyncio.sslproto
import os
import urllib.request
from pathlib import Path

from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio.config import incluster_config, kube_config
from kubernetes_asyncio.config.config_exception import ConfigException

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

#: The read buffer of each TLS connection asyncio opens (its default: 256 KiB, zero-filled, so
#: resident). The operator keeps up to 64 writes in flight per pool, each on its own connection to
#: the apiserver: at the default, 64 connections held 19.5 MiB and 100 held 29.6 MiB; at 64 KiB,
#: 7.8 and 11.0 MiB (client side, measured with kubernetes-asyncio against a local TLS server).
TLS_READ_BUFFER = 64 * 1024


def limit_tls_read_buffer(size: int = TLS_READ_BUFFER) -> None:
    """Cap asyncio's per-connection TLS read buffer (``SSLProtocol.max_size``, the size of the
    buffer each TLS connection allocates and of each read) for connections opened from now on.
    Larger responses are read in more steps; a TLS record is at most 16 KiB anyway."""
    asyncio.sslproto.SSLProtocol.max_size = min(asyncio.sslproto.SSLProtocol.max_size, size)


def env_lookups_find_nothing(environ: dict[str, str] | None = None) -> bool:
    """True when aiohttp's ``trust_env`` lookups cannot find anything: no HTTP(S)/WS proxy
    (``*_proxy`` variables; with ``environ`` None also the system's, as urllib sees them) and no
    netrc file (``$NETRC``, else ``~/.netrc``)."""
    env = os.environ if environ is None else environ
    schemes = {k.lower().removesuffix("_proxy") for k, v in env.items() if v and k.lower().endswith("_proxy")}
    if environ is None:
        schemes |= set(urllib.request.getproxies())
    if schemes & {"http", "https", "ws", "wss"}:
        return False
    try:
        netrc = Path(env.get("NETRC") or Path("~/.netrc").expanduser())
    except RuntimeError:  # no home directory: aiohttp finds no netrc either
        return True
    return not netrc.exists()


def new_api_client(cfg: k8s_client.Configuration) -> k8s_client.ApiClient:
    """An ApiClient on ``cfg``. kubernetes_asyncio opens its aiohttp session with
    ``trust_env=True``: before every request aiohttp then looks for a netrc file and for proxy
    variables, each in a worker thread (two thread hops per request: half the client's CPU per
    node patch, 0.5 of 1.0 ms, measured with bench/bench_operator.py's loop). Where neither exists
    (checked here, once) the lookups are switched off; with a proxy or netrc they stay on."""
    api = k8s_client.ApiClient(configuration=cfg)
    if env_lookups_find_nothing():
        api.rest_client.pool_manager._trust_env = False
    return api


class KubeConfigError(Exception):
    """No usable cluster configuration (message says which source failed and why)."""


def in_cluster(environ: dict[str, str] | None = None, sa_dir: Path = SERVICE_ACCOUNT_DIR) -> bool:
    """True when running in a pod: the service env vars and the mounted token exist."""
    env = os.environ if environ is None else environ
    return bool(env.get("KUBERNETES_SERVICE_HOST")) and (sa_dir / "token").is_file()


def default_kubeconfig_path(environ: dict[str, str] | None = None) -> str:
    """The kubeconfig kubectl would use: the first entry of ``KUBECONFIG``, else ~/.kube/config."""
    env = os.environ if environ is None else environ
    value = env.get("KUBECONFIG", "")
    first = next((p for p in value.split(os.pathsep) if p), "")
    return first or str(Path("~/.kube/config").expanduser())


def new_configuration() -> k8s_client.Configuration:
    """A fresh Configuration that never copies the library-wide default."""
    # Configuration() itself is fine in kubernetes_asyncio 36, but type.__call__ makes the
    # intent explicit and matches what the library's own loaders do.
    cfg: k8s_client.Configuration = type.__call__(k8s_client.Configuration)
    return cfg


def _existing_kubeconfig(kubeconfig: str | None, environ: dict[str, str] | None) -> str:
    path = kubeconfig if kubeconfig is not None else default_kubeconfig_path(environ)
    if not Path(path).is_file():
        raise KubeConfigError(f"kubeconfig {path!r} does not exist (pass --kubeconfig or set KUBECONFIG)")
    return path


async def load_configuration(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    environ: dict[str, str] | None = None,
    sa_dir: Path = SERVICE_ACCOUNT_DIR,
) -> k8s_client.Configuration:
    """Fill a new Configuration: explicit kubeconfig, else in-cluster, else the default kubeconfig.

    Also caps asyncio's TLS read buffer (``limit_tls_read_buffer``) for the process: every
    gpushare process that talks to the apiserver loads its configuration here first."""
    limit_tls_read_buffer()
    cfg = new_configuration()
    if kubeconfig is None and in_cluster(environ, sa_dir):
        try:
            loader = incluster_config.InClusterConfigLoader(
                token_filename=str(sa_dir / "token"),
                cert_filename=str(sa_dir / "ca.crt"),
                environ=dict(os.environ) if environ is None else environ,
            )
            loader.load_and_set(cfg)
        except ConfigException as exc:
            raise KubeConfigError(f"in-cluster configuration: {exc}") from None
        return cfg
    path = _existing_kubeconfig(kubeconfig, environ)
    try:
        await kube_config.load_kube_config(
            config_file=path, context=context, client_configuration=cfg, persist_config=False
        )
    except (ConfigException, OSError, ValueError, KeyError) as exc:
        raise KubeConfigError(f"kubeconfig {path!r}: {exc}") from None
    return cfg


async def make_api_client(
    kubeconfig: str | None = None, *, context: str | None = None
) -> k8s_client.ApiClient:
    """An ApiClient with its own Configuration (see the module docstring for the lookup order).

    The caller owns the client: ``async with await make_api_client(...) as api:`` or
    ``await api.close()``.
    """
    cfg = await load_configuration(kubeconfig, context=context)
    return new_api_client(cfg)
