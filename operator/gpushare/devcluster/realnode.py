"""Real kubelet nodes beside the kwok nodes of the local control plane (``DevCluster(real_nodes=1)``).

One containerd (Debian's 1.6, runc, the bridge CNI plugin) started for the cluster, and per real
node a kubelet v1.34 (``hack/build-kubelet.sh``) with its own root dir and ports, registered with a
node token. Pods on it are real containers: the images (a pause binary, the project's device plugin
``realnode/deviceplugin``, a workload that prints its environment) are built locally
(``make realnode-bins``) and imported into containerd; nothing is pulled.

What it changes on the host, and how :meth:`RealNodes.stop` undoes it (also after a failed start):

* processes: containerd, the kubelet, the shims and the containers (every process left in the
  ``kubepods`` cgroups is killed at the end);
* networking: bridge ``gpushare0`` and veths (the CNI plugins, torn down through CRI by
  ``gpushare-node-reset``), network namespaces in /run/netns, ``net.ipv4.ip_forward``;
* sysctls the kubelet sets (``vm.overcommit_memory``, ``kernel.panic``, ...): put back as found;
* iptables chains that did not exist before (the kubelet's own are turned off in its config);
* mounts under the cluster directory (containerd's rootfs, the kubelet's volumes);
* cgroups ``kubepods`` in every hierarchy; dirs /var/lib/kubelet (the device-plugin socket dir is
  hard-coded there), /var/lib/cni, /run/containerd, /usr/libexec/kubernetes, /opt/containerd.

The state before start is kept in ``<dir>/realnode/host-before.json``, and ``/run/gpushare-realnode.dir``
names that dir while the node runs: a later start (or ``devcluster down``) after a killed run undoes
that run's changes first.

One real node per host: the kubelet's device-plugin directory is global.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpushare.devcluster import pki
from gpushare.devcluster.binaries import K8S_VERSION
from gpushare.devcluster.images import build_image
from gpushare.devcluster.process import DevClusterError, Process

REPO = Path(__file__).resolve().parents[3]
PROGRAMS = ("gpushare-device-plugin", "pause", "workload", "gpushare-node-reset", "gpushare-nvidia-caps")
IMAGE_PAUSE = "localhost/gpushare/pause:1.0"
IMAGE_WORKLOAD = "localhost/gpushare/workload:1.0"
#: The ref the stand-in device-plugin DaemonSet uses (fakes.py); a real node runs it.
IMAGE_PLUGIN = "registry.invalid/gpushare-device-plugin:fake"
#: Label on real nodes (set by the kubelet at registration).
REAL_NODE_LABEL = "gpushare.io/real-node"
PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
BRIDGE = "gpushare0"
POD_SUBNET = "10.88.0.0/24"
POD_GATEWAY = "10.88.0.1"
CNI_BIN = Path("/usr/lib/cni")
#: Sysctls the kubelet (protectKernelDefaults: false) and the bridge CNI plugin may change.
SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward",
)
#: Host paths created by containerd, the kubelet or the CNI plugins; removed when they were absent.
HOST_DIRS = (
    "/var/lib/kubelet",
    "/var/lib/cni",
    "/run/containerd",
    "/run/netns",
    "/usr/libexec/kubernetes",
    "/opt/containerd",
)
IPTABLES = ("iptables", "ip6tables")
#: Names the state dir of the real node running on this host (removed when it stopped cleanly). A
#: start that finds it, its run killed (kill -9 of the test process), undoes that run's host changes
#: first, from that run's own record of the host before it.
MARKER = Path("/run/gpushare-realnode.dir")
IPTABLES_TABLES = ("filter", "nat", "mangle")
#: nat chain (jumped to from PREROUTING) sending pods' connections to the kubernetes Service's
#: ClusterIP to the apiserver on the host's address.
API_CHAIN = "GPUSHARE-APISERVER"


class RealNodeUnavailable(Exception):
    """Real nodes cannot run on this host; the message is one line saying what and how."""


def kubelet_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("GPUSHARE_KUBELET_BIN"):
        return Path(env["GPUSHARE_KUBELET_BIN"]) / "kubelet"
    cache = Path(env["GPUSHARE_CACHE"]) if env.get("GPUSHARE_CACHE") else Path.home() / ".cache/gpushare"
    return cache / "bin" / f"kubelet-{K8S_VERSION}" / "kubelet"


def programs_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    return Path(env["GPUSHARE_REALNODE_BIN"]) if env.get("GPUSHARE_REALNODE_BIN") else REPO / "build/realnode"


def _tool(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if os.access(p, os.X_OK)), None
    )


def _other_kubelet() -> int | None:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if (proc / "comm").read_text().strip() == "kubelet":
                return int(proc.name)
    return None


def preflight(n: int) -> None:
    """RealNodeUnavailable (one line: what is missing and how to get it) unless ``n`` real nodes can run."""
    if n > 1:
        raise RealNodeUnavailable(
            f"--real-nodes {n}: at most 1 real node per host (the kubelet's device-plugin socket "
            f"directory {PLUGIN_DIR} is global)"
        )
    if os.geteuid() != 0:
        raise RealNodeUnavailable(
            "real nodes need root (containerd, kubelet, cgroups, mounts); run as root, "
            "or `make test REAL_NODES=0` to leave the real-node tier out"
        )
    if not (Path("/sys/fs/cgroup/memory").is_dir() or Path("/sys/fs/cgroup/cgroup.controllers").exists()):
        raise RealNodeUnavailable(
            "no Linux cgroups under /sys/fs/cgroup; real nodes cannot run here (`make test REAL_NODES=0`)"
        )
    missing = [t for t in ("containerd", "ctr", "runc", "ip") if _tool(t) is None]
    missing += [str(CNI_BIN / p) for p in ("bridge", "host-local") if not os.access(CNI_BIN / p, os.X_OK)]
    if missing:
        raise RealNodeUnavailable(f"missing {', '.join(missing)}; run `make realnode-prereqs`")
    if not os.access(kubelet_path(), os.X_OK):
        raise RealNodeUnavailable(f"no kubelet at {kubelet_path()}; run `make kubelet`")
    absent = [p for p in PROGRAMS if not os.access(programs_dir() / p, os.X_OK)]
    if absent:
        raise RealNodeUnavailable(
            f"{', '.join(absent)} not built in {programs_dir()}; run `make realnode-bins`"
        )
    pid = _other_kubelet()
    if pid is not None:
        raise RealNodeUnavailable(
            f"another kubelet runs on this host (pid {pid}); its device-plugin directory {PLUGIN_DIR} "
            "is the one a real node needs"
        )


def host_ip() -> str:
    """The host's first global IPv4 address (the kubelet refuses a loopback node IP)."""
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True, check=False
    ).stdout
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            return parts[parts.index("inet") + 1].split("/")[0]
    raise RealNodeUnavailable("no global IPv4 address on this host for the kubelet's node IP")


def _read_sysctl(name: str) -> str | None:
    try:
        return (Path("/proc/sys") / name.replace(".", "/")).read_text().strip()
    except OSError:
        return None


def _write_sysctl(name: str, value: str) -> None:
    with contextlib.suppress(OSError):
        (Path("/proc/sys") / name.replace(".", "/")).write_text(value + "\n")


def _chains() -> list[list[str]]:
    out: list[list[str]] = []
    for tool in IPTABLES:
        if _tool(tool) is None:
            continue
        for table in IPTABLES_TABLES:
            res = subprocess.run([tool, "-w", "-t", table, "-S"], capture_output=True, text=True, check=False)
            out.extend(
                [tool, table, line.split()[1]] for line in res.stdout.splitlines() if line.startswith("-N ")
            )
    return out


def _mounts() -> list[str]:
    targets = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) > 1:
                targets.append(parts[1].replace("\\040", " "))
    return targets


@dataclass
class HostBefore:
    """What the host looked like before the real node started (restored by ``undo``)."""

    sysctls: dict[str, str] = field(default_factory=dict)
    dirs: dict[str, bool] = field(default_factory=dict)
    chains: list[list[str]] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    bridge: bool = False

    @classmethod
    def capture(cls) -> HostBefore:
        netns = Path("/run/netns")
        return cls(
            sysctls={n: v for n in SYSCTLS if (v := _read_sysctl(n)) is not None},
            dirs={d: Path(d).exists() for d in HOST_DIRS},
            chains=_chains(),
            netns=sorted(p.name for p in netns.iterdir()) if netns.is_dir() else [],
            bridge=Path(f"/sys/class/net/{BRIDGE}").exists(),
        )

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.__dict__, indent=1, sort_keys=True))

    @classmethod
    def load(cls, path: Path) -> HostBefore:
        return cls(**json.loads(path.read_text()))


def _kill_kubepods() -> None:
    """SIGKILL every process still in a kubepods cgroup (containers whose shim is gone)."""
    for root in Path("/sys/fs/cgroup").glob("*/kubepods"):
        for procs in root.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                for pid in procs.read_text().split():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(int(pid), signal.SIGKILL)


def _rm_cgroups() -> None:
    for root in [*Path("/sys/fs/cgroup").glob("*/kubepods"), Path("/sys/fs/cgroup/kubepods")]:
        if not root.is_dir():
            continue
        for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                d.rmdir()
        for _ in range(20):  # a cgroup whose last task just died can stay busy for a moment
            try:
                root.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def _kill_shims(socket_path: Path) -> None:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            if cmd and cmd[0].endswith(b"containerd-shim-runc-v2") and str(socket_path).encode() in cmd:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(proc.name), signal.SIGKILL)


def undo_host(before: HostBefore, state_dir: Path, containerd_socket: Path) -> list[str]:
    """Undo what a real node changed on the host; returns what could not be undone (for a warning)."""
    problems: list[str] = []
    _kill_shims(containerd_socket)
    _kill_kubepods()
    # Mounts: ours (under the state dir) and new network namespaces, deepest first.
    netns = Path("/run/netns")
    new_ns = [str(p) for p in netns.iterdir() if p.name not in before.netns] if netns.is_dir() else []
    targets = sorted(
        {m for m in _mounts() if m.startswith(f"{state_dir}/") or m in new_ns}, key=len, reverse=True
    )
    problems += [
        f"umount {t}"
        for t in targets
        if subprocess.run(["umount", "-l", t], capture_output=True, check=False).returncode != 0
    ]
    for ns in new_ns:
        with contextlib.suppress(OSError):
            Path(ns).unlink()
    if not before.bridge and Path(f"/sys/class/net/{BRIDGE}").exists():
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)
    old_chains = {tuple(c) for c in before.chains}
    for tool, table, chain in reversed(_chains()):
        if (tool, table, chain) in old_chains:
            continue
        rules = subprocess.run([tool, "-w", "-t", table, "-S"], capture_output=True, text=True, check=False)
        for rule in rules.stdout.splitlines():
            words = rule.split()
            if words[:1] == ["-A"] and "-j" in words and words[words.index("-j") + 1] == chain:
                subprocess.run([tool, "-w", "-t", table, "-D", *words[1:]], capture_output=True, check=False)
        subprocess.run([tool, "-w", "-t", table, "-F", chain], capture_output=True, check=False)
        subprocess.run([tool, "-w", "-t", table, "-X", chain], capture_output=True, check=False)
    _rm_cgroups()
    for name, value in before.sysctls.items():
        if _read_sysctl(name) != value:
            _write_sysctl(name, value)
            if _read_sysctl(name) != value:
                problems.append(f"sysctl {name}")
    for d, existed in before.dirs.items():
        if not existed and Path(d).exists():
            shutil.rmtree(d, ignore_errors=True)
            if Path(d).exists():
                problems.append(f"rm {d}")
    return problems


@dataclass
class RealNode:
    name: str
    token: str
    ip: str
    port: int
    healthz_port: int
    dir: Path
    kubelet: Process | None = None


def containerd_config(d: Path) -> str:
    return f"""version = 2
root = "{d / "containerd/root"}"
state = "{d / "containerd/state"}"
oom_score = 0

[grpc]
  address = "{d / "run/containerd.sock"}"

[ttrpc]
  address = "{d / "run/containerd.sock.ttrpc"}"

[debug]
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d / "containerd/opt"}"

[plugins."io.containerd.grpc.v1.cri"]
  # Without it runc cannot start a sandbox on a host that denies lowering oom_score_adj.
  restrict_oom_score_adj = true
  sandbox_image = "{IMAGE_PAUSE}"
  disable_apparmor = true
  enable_selinux = false
  max_container_log_line_size = 16384
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{d / "cni"}"
    max_conf_num = 1
"""


def cni_config(d: Path) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "gpushare-realnode",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(d / "cni-ipam"),
                    "ranges": [[{"subnet": POD_SUBNET, "gateway": POD_GATEWAY}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            }
        ],
    }


def kubelet_config(d: Path, node: RealNode, ca_path: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "containerRuntimeEndpoint": f"unix://{d / 'run/containerd.sock'}",
        "imageServiceEndpoint": f"unix://{d / 'run/containerd.sock'}",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_path)},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(node.dir / "pki/kubelet.crt"),
        "tlsPrivateKeyFile": str(node.dir / "pki/kubelet.key"),
        "address": node.ip,
        "port": node.port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": node.healthz_port,
        "oomScoreAdj": 0,
        "clusterDomain": "cluster.local",
        "resolvConf": "/etc/resolv.conf",
        # No KUBE-FIREWALL / canary chains: nothing here needs them, and less to undo.
        "makeIPTablesUtilChains": False,
        "serializeImagePulls": True,
        # The images are imported, never pulled: never garbage-collect them.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2%", "imagefs.available": "2%"},
        "maxPods": 30,
        "registerNode": True,
        "nodeStatusUpdateFrequency": "10s",
        # A pod's ConfigMap volumes are rewritten at its periodic sync: every 15 s plus up to half
        # of it in jitter here, against the default 1 min, so that a config added to NVIDIA's
        # ConfigMaps reaches the plugin's pods in at most about 23 s. Tests whose pools add configs
        # set configPropagationSeconds to match (the operator's default, 90 s, fits the default).
        "syncFrequency": "15s",
    }


def node_kubeconfig(server: str, ca_pem: bytes, token: str, user: str) -> dict[str, Any]:
    import base64

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "devcluster",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "devcluster", "context": {"cluster": "devcluster", "user": user}}],
        "current-context": "devcluster",
    }


class RealNodes:
    """containerd and the kubelets of the real nodes of one DevCluster (see the module doc)."""

    def __init__(self, cluster_dir: Path, names: Sequence[str], tokens: Mapping[str, str]) -> None:
        self.dir = cluster_dir / "realnode"
        self.ip = host_ip()
        self.nodes = [
            RealNode(name=n, token=tokens[n], ip=self.ip, port=0, healthz_port=0, dir=self.dir / "nodes" / n)
            for n in names
        ]
        self.containerd: Process | None = None
        self.before: HostBefore | None = None
        self.log_dir = cluster_dir / "logs"
        self.server = ""
        self.ca_path = Path()

    @property
    def socket(self) -> Path:
        return self.dir / "run/containerd.sock"

    @property
    def procs(self) -> list[Process]:
        out = [self.containerd] if self.containerd else []
        return out + [n.kubelet for n in self.nodes if n.kubelet]

    def _ctr(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", "-a", str(self.socket), "-n", "k8s.io", *args],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip

    def start(
        self,
        *,
        server: str,
        ca: pki.KeyPair,
        ca_path: Path,
        ports: Sequence[int],
        api_service: tuple[str, int] | None = None,
    ) -> None:
        """containerd (+ images) and every kubelet; ``ports``: two free ports per node;
        ``api_service``: (ClusterIP of the kubernetes Service, apiserver port) to DNAT for pods."""

        self.server, self.ca_path = server, ca_path
        (self.dir / "run").mkdir(parents=True, exist_ok=True)
        recover_killed_run()
        MARKER.write_text(str(self.dir))
        before_file = self.dir / "host-before.json"
        self.before = HostBefore.capture()
        self.before.save(before_file)
        if api_service is not None:
            self.route_api_service(*api_service)
        (self.dir / "cni").mkdir(exist_ok=True)
        (self.dir / "cni/10-gpushare-realnode.conflist").write_text(
            json.dumps(cni_config(self.dir), indent=2)
        )
        (self.dir / "containerd.toml").write_text(containerd_config(self.dir))
        self.containerd = Process(
            "containerd",
            [_tool("containerd") or "containerd", "--config", str(self.dir / "containerd.toml")],
            self.log_dir / "containerd.log",
        )
        self.containerd.start()
        deadline = time.monotonic() + 30
        while not self.socket.exists():
            if not self.containerd.alive() or time.monotonic() > deadline:
                raise DevClusterError(
                    f"containerd did not start; log: {self.containerd.log_path}\n{self.containerd.log_tail()}"
                )
            time.sleep(0.1)
        self.import_images()
        PLUGIN_DIR.mkdir(parents=True, exist_ok=True)
        for i, node in enumerate(self.nodes):
            node.port, node.healthz_port = ports[2 * i], ports[2 * i + 1]
            (node.dir / "pki").mkdir(parents=True, exist_ok=True)
            pki.make_serving_cert(
                ca, node.name, ips=(node.ip, "127.0.0.1"), dns_names=(node.name, "localhost")
            ).write(node.dir / "pki/kubelet.crt", node.dir / "pki/kubelet.key")
            user = f"system:node:{node.name}"
            (node.dir / "kubeconfig").write_text(
                yaml.safe_dump(node_kubeconfig(server, ca.cert_pem, node.token, user))
            )
            (node.dir / "kubeconfig").chmod(0o600)
            (node.dir / "config.yaml").write_text(yaml.safe_dump(kubelet_config(self.dir, node, ca_path)))
            self.start_kubelet(node)

    def route_api_service(self, cluster_ip: str, api_port: int) -> None:
        """Pods (not host network) reach the apiserver at ``cluster_ip:443``: DNAT to the host's
        address, in a chain of our own (:func:`undo_host` removes it with its jump)."""

        tool = _tool("iptables")
        if tool is None:
            raise DevClusterError("iptables not found; run `make realnode-prereqs`")
        for rule in (
            ["-N", API_CHAIN],
            ["-A", API_CHAIN, "-d", f"{cluster_ip}/32", "-p", "tcp", "--dport", "443",
             "-j", "DNAT", "--to-destination", f"{self.ip}:{api_port}"],
            ["-I", "PREROUTING", "1", "-j", API_CHAIN],
        ):  # fmt: skip
            res = subprocess.run(
                [tool, "-w", "-t", "nat", *rule], capture_output=True, text=True, check=False
            )
            if res.returncode != 0:
                raise DevClusterError(f"iptables -t nat {' '.join(rule)}: {res.stderr.strip()}")

    def import_archive(self, tar: Path) -> None:
        """Import a docker-archive (e.g. the product's image, ``hack/build-image-local.sh``)."""

        res = self._ctr("images", "import", str(tar), timeout=300)
        if res.returncode != 0:
            raise DevClusterError(f"importing {tar} into containerd failed: {res.stderr.strip()}")

    def import_images(self) -> None:

        bins = programs_dir()
        images = self.dir / "images"
        # The workload image links /lib and /lib64 into /usr: a test that mounts the host's /usr
        # (and a Python) read-only can run host programs in it, e.g. `gpushare quota`.
        usr_links = {"lib": "usr/lib", "lib64": "usr/lib64"}
        for ref, prog, links in (
            (IMAGE_PAUSE, "pause", None),
            (IMAGE_WORKLOAD, "workload", usr_links),
            (IMAGE_PLUGIN, "gpushare-device-plugin", None),
        ):
            tar = build_image(ref, bins / prog, images / f"{prog}.tar", links=links)
            res = self._ctr("images", "import", str(tar))
            if res.returncode != 0:
                raise DevClusterError(f"importing image {ref} into containerd failed: {res.stderr.strip()}")

    def kubelet_argv(self, node: RealNode) -> list[str]:
        return [
            str(kubelet_path()),
            f"--config={node.dir / 'config.yaml'}",
            f"--kubeconfig={node.dir / 'kubeconfig'}",
            f"--root-dir={node.dir / 'kubelet'}",
            f"--cert-dir={node.dir / 'pki'}",
            f"--hostname-override={node.name}",
            f"--node-ip={node.ip}",
            f"--node-labels={REAL_NODE_LABEL}=true",
            "--v=2",
        ]

    def start_kubelet(self, node: RealNode) -> None:
        node.kubelet = Process(
            f"kubelet-{node.name}", self.kubelet_argv(node), self.log_dir / f"kubelet-{node.name}.log"
        )
        node.kubelet.start()

    def node(self, name: str) -> RealNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def restart_kubelet(self, name: str) -> None:
        """Stop the node's kubelet (SIGTERM; its pods keep running) and start it again."""
        node = self.node(name)
        if node.kubelet is not None:
            node.kubelet.stop()
        self.start_kubelet(node)

    def stop(self) -> list[str]:
        """Stop the kubelets, remove every pod sandbox through CRI, stop containerd, undo the host."""
        for node in self.nodes:
            if node.kubelet is not None:
                node.kubelet.stop()
        problems: list[str] = []
        if self.containerd is not None and self.containerd.alive():
            reset = subprocess.run(
                [str(programs_dir() / "gpushare-node-reset"), f"--endpoint=unix://{self.socket}"],
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            if reset.returncode != 0:
                problems.append(f"node reset: {reset.stderr.strip()[-300:]}")
        if self.containerd is not None:
            self.containerd.stop()
        before_file = self.dir / "host-before.json"
        before = self.before or (HostBefore.load(before_file) if before_file.exists() else None)
        if before is not None:
            problems += undo_host(before, self.dir, self.socket)
        # containerd's root (unmounted above) is large; the logs stay in the cluster's logs dir.
        shutil.rmtree(self.dir / "containerd", ignore_errors=True)
        if not problems:
            before_file.unlink(missing_ok=True)  # its presence means: host cleanup still owed
            with contextlib.suppress(OSError):
                if MARKER.read_text() == str(self.dir):
                    MARKER.unlink()
        return problems


def recover_killed_run() -> None:
    """Undo the host changes of an earlier real node whose process was killed before its cleanup."""
    try:
        prev = Path(MARKER.read_text().strip())
    except OSError:
        return
    problems = undo_leftovers(prev.parent)
    if problems is not None:
        print(
            f"gpushare.devcluster: undid the host changes of a killed real node ({prev})"
            + (f"; incomplete: {'; '.join(problems)}" if problems else ""),
            file=sys.stderr,
        )
    MARKER.unlink(missing_ok=True)


def undo_leftovers(cluster_dir: Path) -> list[str] | None:
    """Undo the host changes of real nodes whose supervisor died without cleaning up (``down``).

    None when there was nothing to undo; else what could not be undone."""
    d = cluster_dir / "realnode"
    before_file = d / "host-before.json"
    if not before_file.exists():
        return None
    problems = undo_host(HostBefore.load(before_file), d, d / "run/containerd.sock")
    shutil.rmtree(d / "containerd", ignore_errors=True)
    if not problems:
        before_file.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            if MARKER.read_text() == str(d):
                MARKER.unlink()
    return problems
