"""Start and stop a real control plane on 127.0.0.1: etcd, kube-apiserver, kcm, scheduler, kwok,
and ``pluginsim`` (a simulator of ACK's gpushare device plugin, see ``pluginsim.py``).

``DevCluster`` is a context manager::

    with DevCluster() as info:
        print(info.kubeconfig)

Ports are picked free at start. Logs go to ``<dir>/logs/<component>.log``; the
directory is removed after a clean stop and kept (its path printed) after a failure
or when ``keep=True``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from gpushare.devcluster import pki
from gpushare.devcluster.binaries import Binaries, find_binaries
from gpushare.devcluster.process import DevClusterError, Process, stop_all, tail
from gpushare.devcluster.realnode import REAL_NODE_LABEL, RealNodes, host_ip, preflight

SERVICE_CIDR = "10.96.0.0/16"
#: The ClusterIP of the ``kubernetes`` Service (the first of SERVICE_CIDR): what in-cluster clients dial.
KUBERNETES_SERVICE_IP = "10.96.0.1"
POD_CIDR = "10.244.0.1/16"
ADMIN_USER = "devcluster-admin"

KCM_CONTROLLERS = (
    "daemonset-controller",
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "job-controller",
    "cronjob-controller",
    "ttl-after-finished-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "disruption-controller",
    "node-lifecycle-controller",
    "pod-garbage-collector-controller",
    "endpointslice-controller",
    "resourcequota-controller",
    "clusterrole-aggregation-controller",
    "root-ca-certificate-publisher-controller",
)


@dataclass(frozen=True)
class ClusterInfo:
    """Everything a client needs: where the apiserver is and how to authenticate."""

    dir: Path
    kubeconfig: Path
    server: str
    token: str
    ca_path: Path
    bin_dir: Path
    ports: dict[str, int]
    pids: dict[str, int]
    #: names of the real kubelet nodes (``DevCluster(real_nodes=...)``); empty: kwok only
    real_nodes: list[str] = field(default_factory=list)

    @property
    def ca_pem(self) -> bytes:
        return self.ca_path.read_bytes()

    @property
    def log_dir(self) -> Path:
        return self.dir / "logs"

    def to_json(self) -> str:
        d = asdict(self)
        return json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in d.items()}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> ClusterInfo:
        d: dict[str, Any] = json.loads(text)
        for key in ("dir", "kubeconfig", "ca_path", "bin_dir"):
            d[key] = Path(d[key])
        return cls(**d)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _free_ports(n: int) -> list[int]:
    ports: set[int] = set()
    while len(ports) < n:
        ports.add(free_port())
    return sorted(ports)


def write_kubeconfig(path: Path, server: str, ca_pem: bytes, token: str, name: str = "gpushare-dev") -> None:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": ADMIN_USER, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": ADMIN_USER}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)


#: Control planes started by this process, by directory (``DevCluster.of``).
_RUNNING: dict[str, DevCluster] = {}


class DevCluster:
    """A local control plane. Start from the main thread (see ``process.py``)."""

    def __init__(
        self,
        workdir: Path | str | None = None,
        *,
        bin_dir: Path | str | None = None,
        keep: bool = False,
        with_controllers: bool = True,
        start_timeout: float = 90.0,
        verbosity: int = 1,
        plugin_sim: bool = True,
        real_nodes: int = 0,
        real_node_timeout: float = 120.0,
        audit_policy: str | None = None,
        users: tuple[str, ...] = (),
        kwok_stages: str | None = None,
    ) -> None:
        self.binaries: Binaries = find_binaries(bin_dir)
        self._own_dir = workdir is None
        self.dir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="gpushare-devcluster-"))
        self.keep = keep
        self.with_controllers = with_controllers
        self.start_timeout = start_timeout
        self.verbosity = verbosity
        #: with the controllers: also run the device-plugin simulator (it acts only on nodes that opt in)
        self.plugin_sim = plugin_sim
        #: real kubelet nodes (``realnode.py``) to start beside kwok; 0 keeps the cluster kwok-only
        self.real_nodes = real_nodes
        self.real_node_timeout = real_node_timeout
        self.real: RealNodes | None = None
        #: an audit Policy (YAML text): the apiserver writes its audit log to ``<dir>/logs/audit.log``
        self.audit_policy = audit_policy
        #: more admin users (system:masters), each with a token and ``<dir>/kubeconfig-<user>``: a
        #: harness tells writers apart in the audit log by user
        self.users = users
        #: kwok Stage objects (YAML text) for kwok's config: kwok uses them instead of its built-in
        #: stages of the kinds they name (e.g. Job pods that run a while instead of completing at once)
        self.kwok_stages = kwok_stages
        self.procs: list[Process] = []
        self.info: ClusterInfo | None = None
        self._ssl: ssl.SSLContext | None = None

    # -- context manager -------------------------------------------------------------
    def __enter__(self) -> ClusterInfo:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop(failed=exc_type is not None)

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> ClusterInfo:
        try:
            return self._start()
        except BaseException:
            self.stop(failed=True)
            raise

    def stop(self, *, failed: bool = False) -> None:
        _RUNNING.pop(str(self.dir), None)
        if self.real is not None:
            problems = self.real.stop()
            self.real = None
            if problems:
                print(
                    f"gpushare.devcluster: real node cleanup incomplete: {'; '.join(problems)}",
                    file=sys.stderr,
                )
        stop_all(self.procs)
        self.procs = []
        if failed or self.keep:
            if failed:
                print(f"gpushare.devcluster: logs kept in {self.dir / 'logs'}", file=sys.stderr)
            return
        # Only remove what we created: our own temp dir, or the files we wrote.
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            subs = ("etcd-data", "pki", "logs", "kubeconfig", "cluster.json", "kwok.yaml", "realnode")
            extra = ("audit-policy.yaml", *(f"kubeconfig-{user}" for user in self.users))
            for sub in (*subs, *extra):
                p = self.dir / sub
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)

    def all_procs(self) -> list[Process]:
        """The control plane's processes and the real nodes' (containerd, kubelets)."""
        return [*self.procs, *(self.real.procs if self.real else [])]

    def _start(self) -> ClusterInfo:
        d = self.dir
        if self.real_nodes:
            preflight(self.real_nodes)  # RealNodeUnavailable: one line, before anything starts
        # Always a fresh cluster: drop the state of an earlier run in the same directory.
        for sub in ("etcd-data", "logs"):
            shutil.rmtree(d / sub, ignore_errors=True)
        (d / "logs").mkdir(parents=True, exist_ok=True)
        pki_dir = d / "pki"
        pki_dir.mkdir(exist_ok=True)
        ca = pki.make_ca()
        ca.write(pki_dir / "ca.crt", pki_dir / "ca.key")
        # With real nodes, pods reach the apiserver at the kubernetes Service's ClusterIP (DNAT to
        # the host's address, realnode.py): the certificate names both.
        api_ips = ("127.0.0.1", *((KUBERNETES_SERVICE_IP, host_ip()) if self.real_nodes else ()))
        pki.make_serving_cert(
            ca,
            "kube-apiserver",
            ips=api_ips,
            dns_names=("localhost", "kubernetes.default.svc"),
        ).write(pki_dir / "apiserver.crt", pki_dir / "apiserver.key")
        sa = pki.make_service_account_keys()
        sa.write(pki_dir / "sa.pub", pki_dir / "sa.key")
        token = secrets.token_urlsafe(32)
        token_lines = [f'{token},{ADMIN_USER},{ADMIN_USER},"system:masters"']
        real_names = [f"realnode-{i}" for i in range(self.real_nodes)]
        node_tokens = {n: secrets.token_urlsafe(32) for n in real_names}
        token_lines += [f'{t},system:node:{n},system:node:{n},"system:nodes"' for n, t in node_tokens.items()]
        user_tokens = {u: secrets.token_urlsafe(32) for u in self.users}
        token_lines += [f'{t},{u},{u},"system:masters"' for u, t in user_tokens.items()]
        (pki_dir / "tokens.csv").write_text("\n".join(token_lines) + "\n")
        (pki_dir / "tokens.csv").chmod(0o600)

        etcd_port, peer_port, api_port, *node_ports = _free_ports(3 + 2 * self.real_nodes)
        ports = {"etcd": etcd_port, "etcd-peer": peer_port, "kube-apiserver": api_port}
        server = f"https://127.0.0.1:{api_port}"
        kubeconfig = d / "kubeconfig"
        write_kubeconfig(kubeconfig, server, ca.cert_pem, token)
        for user, user_token in user_tokens.items():
            write_kubeconfig(d / f"kubeconfig-{user}", server, ca.cert_pem, user_token)
        self._ssl = ssl.create_default_context(cafile=str(pki_dir / "ca.crt"))
        deadline = time.monotonic() + self.start_timeout

        etcd = self._spawn(
            "etcd",
            [
                "--name=devcluster",
                f"--data-dir={d / 'etcd-data'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=devcluster=http://127.0.0.1:{peer_port}",
                "--listen-metrics-urls=",
                "--unsafe-no-fsync",
                "--watch-progress-notify-interval=5s",
                "--auto-compaction-retention=1",
                "--quota-backend-bytes=2147483648",
                "--log-level=warn",
            ],
        )
        self._wait_http(etcd, f"http://127.0.0.1:{etcd_port}/health", deadline, tls=False)

        api = self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                # Real nodes: also on the host's address, where the DNAT of the kubernetes Service
                # sends the pods' connections (kwok only: loopback, as before).
                f"--bind-address={'0.0.0.0' if self.real_nodes else '127.0.0.1'}",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--tls-cert-file={pki_dir / 'apiserver.crt'}",
                f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
                f"--cert-dir={pki_dir}",
                f"--token-auth-file={pki_dir / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-issuer={server}",
                f"--service-account-key-file={pki_dir / 'sa.pub'}",
                f"--service-account-signing-key-file={pki_dir / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                *self._real_node_apiserver_args(ca, pki_dir),
                *self._audit_args(),
                "--allow-privileged=true",
                "--endpoint-reconciler-type=none",
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                f"--v={self.verbosity}",
            ],
        )
        self._wait_http(api, f"{server}/readyz", deadline, token=token)

        pids = {"etcd": etcd.pid or 0, "kube-apiserver": api.pid or 0}
        if self.with_controllers:
            kc = str(kubeconfig)
            kcm = self._spawn(
                "kube-controller-manager",
                [
                    f"--kubeconfig={kc}",
                    "--leader-elect=false",
                    "--secure-port=0",
                    f"--controllers={','.join(KCM_CONTROLLERS)}",
                    f"--root-ca-file={pki_dir / 'ca.crt'}",
                    f"--service-account-private-key-file={pki_dir / 'sa.key'}",
                    "--concurrent-daemonset-syncs=5",
                    # The default (20/s, burst 30) took minutes to create the device-plugin
                    # DaemonSet's pods on thousands of kwok nodes (the benchmark).
                    "--kube-api-qps=200",
                    "--kube-api-burst=400",
                    # kwok renews the heartbeats of thousands of nodes late on 2 busy CPUs; at the
                    # default 50 s, half of 5000 nodes went NotReady and their pods unready.
                    "--node-monitor-grace-period=300s",
                    f"--v={self.verbosity}",
                ],
            )
            sched = self._spawn(
                "kube-scheduler",
                [
                    f"--kubeconfig={kc}",
                    "--leader-elect=false",
                    "--secure-port=0",
                    "--kube-api-qps=200",  # binds thousands of DaemonSet pods (default 50/s)
                    "--kube-api-burst=400",
                    f"--v={self.verbosity}",
                ],
            )
            kwok_port = free_port()
            ports["kwok"] = kwok_port
            # An explicit, empty config: kwok's built-in fast stages, never ~/.kwok/kwok.yaml.
            (d / "kwok.yaml").write_text(
                self.kwok_stages or "# gpushare devcluster: kwok defaults (fast node and pod stages)\n"
            )
            kwok = self._spawn(
                "kwok",
                [
                    f"--kubeconfig={kc}",
                    f"--config={d / 'kwok.yaml'}",
                    "--manage-all-nodes=false",
                    "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                    f"--cidr={POD_CIDR}",
                    "--node-ip=127.0.0.1",
                    "--node-lease-duration-seconds=40",
                    f"--server-address=127.0.0.1:{kwok_port}",
                ],
            )
            pids |= {"kube-controller-manager": kcm.pid or 0, "kube-scheduler": sched.pid or 0}
            pids["kwok"] = kwok.pid or 0
            sim: Process | None = None
            if self.plugin_sim:
                sim = Process(
                    "pluginsim",
                    [sys.executable, "-m", "gpushare.devcluster.pluginsim", f"--kubeconfig={kc}"],
                    self.dir / "logs" / "pluginsim.log",
                )
                sim.start()
                self.procs.append(sim)
                pids["pluginsim"] = sim.pid or 0
            # The serviceaccount controller creating default/default proves kcm is up and synced.
            self._wait_http(
                kcm, f"{server}/api/v1/namespaces/default/serviceaccounts/default", deadline, token=token
            )
            self._wait_http(kwok, f"http://127.0.0.1:{kwok_port}/healthz", deadline, tls=False)
            for p in (sched, kwok, kcm, *([sim] if sim else [])):
                if not p.alive():
                    raise self._failure(p, "exited during start")

        if self.real_nodes:
            self.real = RealNodes(d, real_names, node_tokens)
            self.real.start(
                server=server,
                ca=ca,
                ca_path=pki_dir / "ca.crt",
                ports=node_ports,
                api_service=(KUBERNETES_SERVICE_IP, api_port),
            )
            self._wait_nodes_ready(real_names, time.monotonic() + self.real_node_timeout, token)
            for node in real_names:
                pids[f"kubelet-{node}"] = self.real.node(node).kubelet.pid or 0  # type: ignore[union-attr]

        self.info = ClusterInfo(
            dir=d,
            kubeconfig=kubeconfig,
            server=server,
            token=token,
            ca_path=pki_dir / "ca.crt",
            bin_dir=self.binaries.dir,
            ports=ports,
            pids=pids,
            real_nodes=real_names,
        )
        (d / "cluster.json").write_text(self.info.to_json())
        _RUNNING[str(d)] = self
        return self.info

    def _audit_args(self) -> list[str]:
        if self.audit_policy is None:
            return []
        policy = self.dir / "audit-policy.yaml"
        policy.write_text(self.audit_policy)
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.dir / 'logs' / 'audit.log'}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--audit-log-maxsize=0",
        ]

    def _real_node_apiserver_args(self, ca: pki.KeyPair, pki_dir: Path) -> list[str]:
        if not self.real_nodes:
            # No token volumes are projected into pods (there is no kubelet to mount them);
            # envtest does the same.
            return ["--disable-admission-plugins=ServiceAccount"]
        # A real kubelet: pods get projected ServiceAccount tokens (ServiceAccount admission on), and
        # the apiserver reaches the kubelet (logs, exec) as a system:masters client it trusts.
        pki.make_client_cert(ca, "kube-apiserver-kubelet-client", ("system:masters",)).write(
            pki_dir / "apiserver-kubelet-client.crt", pki_dir / "apiserver-kubelet-client.key"
        )
        return [
            f"--kubelet-client-certificate={pki_dir / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki_dir / 'apiserver-kubelet-client.key'}",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            # There is no kube-proxy: webhooks and aggregated APIs behind a Service are dialled at
            # the Service's endpoint (pod) IPs, which the host reaches over the pods' bridge.
            "--enable-aggregator-routing=true",
        ]

    def _wait_nodes_ready(self, names: list[str], deadline: float, token: str) -> None:
        assert self.real is not None
        server = f"https://127.0.0.1:{self._api_port()}"
        for name in names:
            node = self.real.node(name)
            last = "not registered yet"
            while True:
                if node.kubelet is None or not node.kubelet.alive():
                    raise self._failure(node.kubelet or self.procs[-1], "exited during start")
                req = urllib.request.Request(f"{server}/api/v1/nodes/{name}")
                req.add_header("Authorization", f"Bearer {token}")
                try:
                    with urllib.request.urlopen(req, timeout=2, context=self._ssl) as resp:
                        obj = json.loads(resp.read())
                    conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
                    ready = conds.get("Ready") or {}
                    if ready.get("status") == "True" and REAL_NODE_LABEL in (
                        obj["metadata"].get("labels") or {}
                    ):
                        break
                    last = f"Ready={ready.get('status')} ({ready.get('message', '')})"
                except (urllib.error.URLError, OSError, ValueError) as exc:
                    last = str(exc)
                if time.monotonic() >= deadline:
                    raise self._failure(
                        node.kubelet, f"node {name} not Ready after {self.real_node_timeout:.0f}s ({last})"
                    )
                time.sleep(0.25)

    def _api_port(self) -> int:
        for proc in self.procs:
            if proc.name == "kube-apiserver":
                for arg in proc.argv:
                    if arg.startswith("--secure-port="):
                        return int(arg.split("=", 1)[1])
        raise DevClusterError("no kube-apiserver in this control plane")

    # -- faults (tests) --------------------------------------------------------------
    @classmethod
    def of(cls, info: ClusterInfo) -> DevCluster:
        """The running DevCluster (in this process) that ``info`` describes."""
        try:
            return _RUNNING[str(info.dir)]
        except KeyError:
            raise DevClusterError(f"no control plane started by this process runs in {info.dir}") from None

    def restart_kubelet(self, node: str) -> None:
        """Restart a real node's kubelet (SIGTERM, then start it again; its pods keep running)."""
        if self.real is None:
            raise DevClusterError("this control plane has no real nodes")
        self.real.restart_kubelet(node)
        if self.info is not None:
            self.info.pids[f"kubelet-{node}"] = self.real.node(node).kubelet.pid or 0  # type: ignore[union-attr]

    def import_image(self, archive: Path) -> None:
        """Import a docker-archive into the real nodes' containerd (their pods can then use it)."""
        if self.real is None:
            raise DevClusterError("this control plane has no real nodes")
        self.real.import_archive(archive)

    def kubelet_root(self, node: str) -> Path:
        """A real node's kubelet root dir (its pods' volumes: ``pods/<uid>/volumes``)."""
        if self.real is None:
            raise DevClusterError("this control plane has no real nodes")
        return self.real.node(node).dir / "kubelet"

    def _proc(self, name: str) -> Process:
        for proc in self.procs:
            if proc.name == name:
                return proc
        raise DevClusterError(f"no component {name!r} in this control plane")

    def kill(self, name: str) -> None:
        """SIGKILL one component (e.g. ``kube-apiserver``), as a crash would; etcd keeps the state."""
        proc = self._proc(name)
        if proc.popen is not None and proc.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGKILL)
            proc.popen.wait(10)

    def pause(self, name: str) -> None:
        """SIGSTOP one component (e.g. ``etcd``): it holds its connections and answers nothing."""
        proc = self._proc(name)
        if proc.popen is not None and proc.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        """SIGCONT a component :meth:`pause` stopped."""
        proc = self._proc(name)
        if proc.popen is not None and proc.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGCONT)

    def restart(self, name: str, *, timeout_s: float | None = None, wait: bool = True) -> None:
        """Start a killed (or running: it is stopped first) component again with the same
        arguments, ports and data; waits until the apiserver is ready again (``wait=False``: the
        caller waits, e.g. from an event loop the wait must not block)."""
        old = self._proc(name)
        old.stop()
        new = Process(name, old.argv, old.log_path)
        new.start()
        self.procs[self.procs.index(old)] = new
        if self.info is not None:
            self.info.pids[name] = new.pid or 0
            if name == "kube-apiserver" and wait:
                deadline = time.monotonic() + (timeout_s or self.start_timeout)
                self._wait_http(new, f"{self.info.server}/readyz", deadline, token=self.info.token)

    # -- helpers ---------------------------------------------------------------------
    def _spawn(self, name: str, args: list[str]) -> Process:
        proc = Process(name, [self.binaries.path(name), *args], self.dir / "logs" / f"{name}.log")
        proc.start()
        self.procs.append(proc)
        return proc

    def _failure(self, proc: Process, what: str) -> DevClusterError:
        rc = proc.returncode()
        status = f"exit code {rc}" if rc is not None else "still running"
        return DevClusterError(
            f"{proc.name} {what} ({status}); log: {proc.log_path}\n--- last lines ---\n{proc.log_tail()}"
        )

    def _wait_http(
        self, proc: Process, url: str, deadline: float, *, tls: bool = True, token: str | None = None
    ) -> None:
        last = "no answer yet"
        while True:
            if not proc.alive():
                raise self._failure(proc, "exited during start")
            req = urllib.request.Request(url)
            if token:
                req.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(req, timeout=2, context=self._ssl if tls else None) as resp:
                    if resp.status == 200:
                        return
                    last = f"HTTP {resp.status}"
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            if time.monotonic() >= deadline:
                raise self._failure(proc, f"not ready after {self.start_timeout:.0f}s at {url} ({last})")
            time.sleep(0.1)


def read_info(workdir: Path | str) -> ClusterInfo:
    """The ClusterInfo a running cluster wrote into its directory."""
    return ClusterInfo.from_json((Path(workdir) / "cluster.json").read_text())


def log_excerpt(info: ClusterInfo, component: str, lines: int = 25) -> str:
    return tail(info.log_dir / f"{component}.log", lines)
