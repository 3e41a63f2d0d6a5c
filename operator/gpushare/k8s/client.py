"""Building a kubernetes_asyncio ApiClient from an explicit Configuration.

kubernetes_asyncio is used for two things only: loading the configuration (kubeconfig contexts,
exec plugins, token refresh, in-cluster service account) and its aiohttp transport. Every request
goes through ``gpushare.k8s.rest`` as raw JSON.

kubernetes_asyncio keeps a process-wide default Configuration and reads ``KUBECONFIG``
when the module is imported. Neither is used here: each client gets its own
Configuration, filled from the in-cluster service account (when running in a pod and
no kubeconfig is given) or from a kubeconfig file chosen at call time.

The client's aiohttp session does not trust the environment (kubernetes_asyncio turns
``trust_env`` on, which makes aiohttp look up ~/.netrc and the proxy variables in a thread on
every request) unless there is something for it to find, a proxy variable or a netrc file: then
aiohttp honours them (and ``NO_PROXY``) as before. A proxy named in the kubeconfig
(``proxy-url``) applies either way.
"""

from __future__ import annotations

import asyncio.sslproto
import os
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio.config import incluster_config, kube_config
from kubernetes_asyncio.config.config_exception import ConfigException

if TYPE_CHECKING:
    import kopf

#: What the layers above ``gpushare.k8s`` name the transport by (they never import kubernetes_asyncio).
ApiClient = k8s_client.ApiClient
Configuration = k8s_client.Configuration

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

#: The read buffer of each TLS connection asyncio opens (its default: 256 KiB, zero-filled, so
#: resident). The operator keeps up to 64 writes in flight per pool, each on its own connection to
#: the apiserver: at the default, 64 connections held 19.5 MiB and 100 held 29.6 MiB; at 64 KiB,
#: 7.8 and 11.0 MiB (client side, measured with kubernetes-asyncio against a local TLS server).
#: On uvloop (the default ``--event-loop``) the cap does not apply and is not needed: uvloop's own
#: SSL protocol mallocs its 256 KiB buffer without filling it, so the pages never read into need
#: not be resident.
TLS_READ_BUFFER = 64 * 1024


#: The client session's read buffer, as kubernetes_asyncio sets it: a watch event may hold a large
#: object (2 MiB).
READ_BUFSIZE = 2**21

#: The read buffer of the sessions that follow watches (``new_api_client(..., read_bufsize=...)``
#: for the Node and Pod watches): aiohttp's own default. aiohttp reads a response until twice its
#: read buffer waits unread in the process; with ``READ_BUFSIZE`` a watch that the event loop falls
#: behind (5000 nodes labelled: 5000 echoes of the operator's own writes) held up to 4 MiB of
#: events in the heap. With this buffer the backlog waits in the socket (the kernel's memory, not
#: the process's) and the line limit stays ``watch.MAX_EVENT_BYTES``.
WATCH_READ_BUFSIZE = 2**16


def limit_tls_read_buffer(size: int = TLS_READ_BUFFER) -> None:
    """Cap asyncio's per-connection TLS read buffer (``SSLProtocol.max_size``, the size of the
    buffer each TLS connection allocates and of each read) for connections opened from now on
    (asyncio's event loop only; uvloop has its own, see ``TLS_READ_BUFFER``).
    Larger responses are read in more steps; a TLS record is at most 16 KiB anyway."""
    asyncio.sslproto.SSLProtocol.max_size = min(asyncio.sslproto.SSLProtocol.max_size, size)


def env_lookups_find_nothing(environ: Mapping[str, str] | None = None) -> bool:
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


def new_configuration() -> Configuration:
    """A fresh Configuration that never copies the library-wide default."""
    # Configuration() itself is fine in kubernetes_asyncio 36, but type.__call__ makes the
    # intent explicit and matches what the library's own loaders do.
    cfg: Configuration = type.__call__(k8s_client.Configuration)
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
) -> Configuration:
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


def trust_env(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the client's session reads the proxy and netrc settings of the environment: only
    where they exist. Off, aiohttp skips two thread hops per request (a netrc and a proxy lookup:
    half the client's CPU per node patch, 0.5 of 1.0 ms, measured with bench/bench_operator.py's
    loop)."""
    return not env_lookups_find_nothing(environ)


async def kopf_connection(
    kubeconfig: str | None, context: str | None = None, default_namespace: str | None = None
) -> kopf.ConnectionInfo:
    """What a ``@kopf.on.login`` handler returns: Kopf's own watches use the same credentials as
    gpushare (``--kubeconfig`` or in-cluster)."""
    import kopf

    cfg = await load_configuration(kubeconfig, context=context)
    keys = cfg.api_key or {}
    token = keys.get("BearerToken") or keys.get("authorization")
    prefix = (cfg.api_key_prefix or {}).get("BearerToken")
    if token and not prefix:
        token = token.removeprefix("Bearer ").removeprefix("bearer ")
    return kopf.ConnectionInfo(
        server=str(cfg.host),
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        token=token or None,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
        username=cfg.username or None,
        password=cfg.password or None,
        default_namespace=default_namespace,
    )


def new_api_client(
    cfg: Configuration, *, environ: Mapping[str, str] | None = None, read_bufsize: int = READ_BUFSIZE
) -> ApiClient:
    """An ApiClient on ``cfg`` whose aiohttp session trusts the environment only when a proxy
    variable is set (``trust_env``) and reads with ``read_bufsize`` (``WATCH_READ_BUFSIZE`` for a
    client that follows watches). Must be called with an event loop running (the session is made
    here)."""
    api = k8s_client.ApiClient(configuration=cfg)
    trust = trust_env(environ)
    rest = api.rest_client
    shipped: aiohttp.ClientSession = rest.pool_manager
    if shipped.trust_env != trust or read_bufsize != READ_BUFSIZE:
        rest.pool_manager = aiohttp.ClientSession(
            connector=shipped.connector,
            trust_env=trust,
            read_bufsize=read_bufsize,
        )
        shipped.detach()  # the connector now belongs to the new session
    return api


async def make_api_client(kubeconfig: str | None = None, *, context: str | None = None) -> ApiClient:
    """An ApiClient with its own Configuration (see the module docstring for the lookup order).

    The caller owns the client: ``async with await make_api_client(...) as api:`` or
    ``await api.close()``.
    """
    cfg = await load_configuration(kubeconfig, context=context)
    return new_api_client(cfg)
