"""``python -m gpushare.devcluster up|down|env|status`` (used by ``make cluster``).

``up`` starts a supervisor process in the background that owns the control plane (the
components die with it, even on ``kill -9``), waits until the cluster and its fake GPU
nodes are ready, and prints how to use it. ``down`` stops the supervisor.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from kubernetes_asyncio import client

from gpushare import __version__
from gpushare import constants as c
from gpushare.devcluster import migmanager
from gpushare.devcluster import nvidia as nv
from gpushare.devcluster.binaries import BinariesMissing
from gpushare.devcluster.cluster import ClusterInfo, DevCluster, read_info
from gpushare.devcluster.crds import install_crd_files
from gpushare.devcluster.demo import (
    DEMO_POOLS,
    MIG_NODE_POOL,
    NVIDIA_NODE_POOL,
    create_demo_nodes,
    create_mig_nodes,
    create_nvidia_nodes,
)
from gpushare.devcluster.demo import NVIDIA_CONFIGS as DEMO_NVIDIA_CONFIGS
from gpushare.devcluster.fakes import (
    POOL_LABEL,
    RealNodePlugin,
    create_gpu_nodes,
    ensure_device_plugin_daemonset,
)
from gpushare.devcluster.process import DevClusterError, tail
from gpushare.devcluster.realnode import RealNodeUnavailable, preflight, undo_leftovers
from gpushare.k8s.client import make_api_client

DEFAULT_DIR = ".cluster"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _supervisor_pid(d: Path) -> int | None:
    try:
        pid = int((d / "supervisor.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _pid_alive(pid) else None


#: The node pool of the real nodes (``--real-nodes``).
REAL_NODEPOOL = "np-real"
#: The product's image as ``--agent-image`` imports it (``make image-local`` builds it).
AGENT_IMAGE = f"localhost/gpushare-operator:{__version__}"
#: NVIDIA's named configs, on the real nodes (``--nvidia-plugin``) and the kwok ones of
#: ``NVIDIA_NODE_POOL``: label a node nvidia.com/device-plugin.config=<name>; without the label,
#: ``default`` (no sharing).
NVIDIA_CONFIGS = DEMO_NVIDIA_CONFIGS


async def _populate(
    info: ClusterInfo,
    nodes_per_pool: int,
    pools: int | None,
    crds: list[Path],
    nvidia: DevCluster | None = None,
    *,
    real_node_plugin: str = "",
    agent_image: Path | None = None,
    mig_manager: bool = False,
) -> None:
    """CRDs, the stand-in device plugin, and the fake GPU nodes: ``pools`` None (``make cluster``)
    makes the node pools examples/ selects (``DEMO_POOLS``: np-cgpu, np-cgpu-no-isolation,
    np-gpu-core, two nodes each, one agent pass each; ``NVIDIA_NODE_POOL``, np-nvidia, whose
    NVIDIA plugin ``pluginsim`` plays, with NVIDIA's ConfigMap and DaemonSet; and ``MIG_NODE_POOL``,
    np-nvidia-mig, whose MIG manager it plays too, with the manager's ConfigMap); a number makes that
    many generic pools np-a, np-b, ... of ``nodes_per_pool`` nodes (tests, benchmarks). Real nodes
    (``--real-nodes``) get the device plugin's nodeSelector and node pool np-real; with ``nvidia``
    (the cluster, ``--nvidia-plugin``) NVIDIA's device plugin runs there instead of the stand-in
    (both would register nvidia.com/gpu), over the fake NVML, with the named configs of
    :data:`NVIDIA_CONFIGS`.
    ``real_node_plugin`` "ack" keeps the real nodes on the stand-in with NVIDIA's plugin installed
    beside it (it runs on a node once the node is labelled nvidia.com/gpu.present=true and is in no
    ACK pool: ``make demo``'s move to an NVIDIA pool). ``agent_image`` (the product's image,
    ``make image-local``) runs the node agent where NVIDIA's plugin may run, over the same library.
    ``mig_manager`` (with ``nvidia``): NVIDIA's MIG manager on the real nodes as the GPU Operator
    deploys it (:mod:`gpushare.devcluster.migmanager`, the chart's mig-parted configs), the plugin
    and the agent seeing its MIG devices; the real nodes start at ``all-disabled``."""
    api = await make_api_client(str(info.kubeconfig))
    async with api:
        await install_crd_files(api, crds)
        real = None
        if info.real_nodes:
            real = RealNodePlugin(api_port=info.ports["kube-apiserver"])
            if nvidia is not None:  # the GPUs of NVIDIA's fake library (2 x A100-SXM4-40GB)
                real = RealNodePlugin(real.api_port, gpus=nv.DEFAULT_GPUS, gpu_memory_mib=40 * 1024)
        await ensure_device_plugin_daemonset(api, real_nodes=real)
        mig_dir = info.dir / "mig" if mig_manager and nvidia is not None and info.real_nodes else None
        if nvidia is not None and info.real_nodes:
            await nv.install(
                api, nvidia, NVIDIA_CONFIGS, mig_state_dir=mig_dir, gpu_operator_labels=mig_dir is not None
            )
            if agent_image is not None:
                await nv.install_agent(api, nvidia, agent_image, AGENT_IMAGE, mig_state_dir=mig_dir)
        on_nvidia = nvidia is not None and real_node_plugin != "ack"
        labels = dict(nv.NODE_SELECTOR) if on_nvidia else {"gpushare": "true"}
        if mig_dir is not None and nvidia is not None:
            await migmanager.install(api, nvidia, mig_dir)
            # What the GPU Operator sets on a GPU node: its operands deployed, no MIG yet.
            labels |= {
                nv.GPU_OPERATOR_DEPLOY_LABEL: "true",
                **migmanager.NODE_SELECTOR,
                c.LABEL_MIG_CONFIG: "all-disabled",
            }
        core = client.CoreV1Api(api)
        for node in info.real_nodes:
            await core.patch_node(node, {"metadata": {"labels": {**labels, POOL_LABEL: REAL_NODEPOOL}}})
    if pools is None:
        await create_demo_nodes(str(info.kubeconfig))
        api = await make_api_client(str(info.kubeconfig))
        async with api:  # NVIDIA's real DaemonSet, where installed, serves the kwok nodes too
            await create_nvidia_nodes(api, stand_in=not (nvidia is not None and info.real_nodes))
            await create_mig_nodes(api)
        return
    api = await make_api_client(str(info.kubeconfig))
    async with api:
        for p in range(pools):
            pool = chr(ord("a") + p)
            await create_gpu_nodes(
                api,
                nodes_per_pool,
                prefix=f"gpu-{pool}",
                pool_labels={POOL_LABEL: f"np-{pool}"},
                gpus_per_node=1 + p,
                gpu_mem_gib_per_gpu=16 if p % 2 == 0 else 24,
                core_percentage=p % 2 == 1,
            )


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the cluster in the foreground until SIGTERM/SIGINT (the supervisor)."""
    d = Path(args.dir).resolve()
    d.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    cluster = DevCluster(d, real_nodes=args.real_nodes)
    crds = [Path(p) for p in args.crd] if args.crd else sorted(Path("crds").glob("*.yaml"))
    (d / "supervisor.pid").write_text(str(os.getpid()))
    try:
        info = cluster.start()
        nvidia = cluster if args.nvidia_plugin else None
        agent = Path(args.agent_image) if args.agent_image else None
        populate = _populate(
            info,
            args.nodes,
            args.pools,
            crds,
            nvidia,
            real_node_plugin=args.real_node_plugin,
            agent_image=agent,
            mig_manager=args.mig_manager,
        )
        asyncio.run(populate)
        (d / "ready").write_text(str(time.time()))
        while not stop.wait(1.0):
            for proc in cluster.all_procs():
                if not proc.alive():
                    print(f"{proc.name} exited (code {proc.returncode()}); log: {proc.log_path}", flush=True)
                    stop.set()
    except (DevClusterError, BinariesMissing, TimeoutError, RealNodeUnavailable) as exc:
        print(f"error: {exc}", flush=True)
        cluster.stop(failed=True)
        return 1
    finally:
        (d / "ready").unlink(missing_ok=True)
        (d / "supervisor.pid").unlink(missing_ok=True)
    cluster.stop(failed=False)
    return 0


def _print_usage(info: ClusterInfo, examples_layout: bool = False) -> None:
    print(f"export KUBECONFIG={info.kubeconfig}")
    print(f"# logs: {info.log_dir}")
    if examples_layout:
        pools = ", ".join(f"{p.nodepool_id} ({p.prefix}-0..{p.count - 1})" for p in DEMO_POOLS)
        print(f"# node pools (alibabacloud.com/nodepool-id): {pools}")
        print("#       the pools of examples/ select them: kubectl apply -f examples/pool-cgpu.yaml")
        nvp = NVIDIA_NODE_POOL
        nodes = f"{nvp.prefix}-0..{nvp.count - 1}, {nvp.gpus} x {nvp.gpu_name}"
        print(f"# NVIDIA node pool {nvp.nodepool_id} ({nodes}; NVIDIA's plugin simulated)")
        print(f"#       configs: {', '.join(NVIDIA_CONFIGS)}; the NVIDIA example selects it:")
        print("#       kubectl apply -f examples/pool-nvidia-time-slicing.yaml")
        mig = MIG_NODE_POOL
        nodes = f"{mig.prefix}-0..{mig.count - 1}, {mig.gpus} x {mig.gpu_name}"
        print(f"# MIG node pool {mig.nodepool_id} ({nodes}; NVIDIA's MIG manager simulated)")
        print("#       the MIG example selects it: kubectl apply -f examples/pool-nvidia-mig.yaml")
    print("# try:  kubectl get nodes -L alibabacloud.com/nodepool-id,aliyun.com/gpu-mem")
    print("#       kubectl -n kube-system get pods -l name=gpushare-device-plugin-ds -o wide")
    if info.real_nodes:
        print(f"# real kubelet nodes (node pool {REAL_NODEPOOL}): {', '.join(info.real_nodes)}")
    print("#       make cluster-down")


def cmd_up(args: argparse.Namespace) -> int:
    d = Path(args.dir).resolve()
    if _supervisor_pid(d) and (d / "ready").exists():
        print(f"# already running in {d}", file=sys.stderr)
        _print_usage(read_info(d))
        return 0
    if _supervisor_pid(d):
        print(f"error: a cluster in {d} is starting or stuck; run `make cluster-down` first", file=sys.stderr)
        return 1
    if args.real_nodes:
        try:
            preflight(args.real_nodes)
        except RealNodeUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    if args.nvidia_plugin:
        missing = [
            f"{path} (make {target})"
            for path, target in (
                *((nv.plugin_bin_dir() / program, "nvidia-plugin") for program in nv.PROGRAMS),
                (nv.fake_nvml_lib(), "fake-nvml"),
            )
            if not path.exists()
        ]
        if not args.real_nodes or missing:
            why = f"missing {', '.join(missing)}" if missing else "it runs on real nodes: add --real-nodes 1"
            print(f"error: --nvidia-plugin: {why}", file=sys.stderr)
            return 1
    if args.mig_manager:
        missing = migmanager.missing()
        if not args.nvidia_plugin or missing:
            why = (
                f"missing {', '.join(missing)}"
                if missing
                else "it runs beside NVIDIA's plugin: add --nvidia-plugin"
            )
            print(f"error: --mig-manager: {why}", file=sys.stderr)
            return 1
    d.mkdir(parents=True, exist_ok=True)
    (d / "ready").unlink(missing_ok=True)
    started = time.monotonic()
    with open(d / "supervisor.log", "ab") as log:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "gpushare.devcluster", "_serve", "--dir", str(d)),
                *("--nodes", str(args.nodes)),
                *(("--pools", str(args.pools)) if args.pools is not None else ()),
                *("--real-nodes", str(args.real_nodes)),
                *(("--nvidia-plugin",) if args.nvidia_plugin else ()),
                *(("--real-node-plugin", args.real_node_plugin) if args.real_node_plugin else ()),
                *(("--agent-image", str(Path(args.agent_image).resolve())) if args.agent_image else ()),
                *(("--mig-manager",) if args.mig_manager else ()),
                *(f"--crd={p}" for p in args.crd),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = started + args.timeout
    while not (d / "ready").exists():
        if proc.poll() is not None:
            print(f"error: the control plane did not start; see {d / 'supervisor.log'}:", file=sys.stderr)
            print(tail(d / "supervisor.log", 30), file=sys.stderr)
            return 1
        if time.monotonic() > deadline:
            print(f"error: not ready after {args.timeout}s; see {d / 'supervisor.log'}", file=sys.stderr)
            return 1
        time.sleep(0.2)
    print(f"# control plane ready in {time.monotonic() - started:.1f}s ({d})", file=sys.stderr)
    _print_usage(read_info(d), examples_layout=args.pools is None)
    if args.nvidia_plugin:
        print(
            f"# NVIDIA's device plugin on the real nodes (namespace {nv.NAMESPACE}); configs: ",
            end="",
        )
        print(", ".join(NVIDIA_CONFIGS))
        print(f"#       kubectl label node <real node> --overwrite {nv.CONFIG_LABEL}=ts4   # 2 fake GPUs x 4")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    d = Path(args.dir).resolve()
    pid = _supervisor_pid(d)
    if pid is None:
        _undo_real_nodes(d)
        print(f"# no cluster running in {d}", file=sys.stderr)
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # its components die with it (PDEATHSIG)
    _undo_real_nodes(d)
    print(f"# stopped the cluster in {d}", file=sys.stderr)
    return 0


def _undo_real_nodes(d: Path) -> None:
    """A supervisor that died (kill -9) left its real nodes' host changes: undo them now."""
    problems = undo_leftovers(d)
    if problems is None:
        return
    if problems:
        print(f"# real-node host cleanup incomplete: {'; '.join(problems)}", file=sys.stderr)
    else:
        print("# undid the host changes a stopped real node had left", file=sys.stderr)


def cmd_env(args: argparse.Namespace) -> int:
    d = Path(args.dir).resolve()
    if not (_supervisor_pid(d) and (d / "ready").exists()):
        print(f"error: no cluster running in {d}; run `make cluster`", file=sys.stderr)
        return 1
    print(f"export KUBECONFIG={read_info(d).kubeconfig}")
    return 0


def _real_nodes_arg(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {n}")
    return n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpushare.devcluster", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name, fn in (("up", cmd_up), ("_serve", cmd_serve)):
        p = sub.add_parser(name)
        p.add_argument("--dir", default=DEFAULT_DIR)
        p.add_argument("--nodes", type=int, default=3, help="fake GPU nodes per generic node pool (--pools)")
        p.add_argument(
            "--pools", type=int, default=None,
            help="N generic node pools np-a, np-b, ... of --nodes nodes each; default: the node pools "
            "examples/ selects (np-cgpu, np-cgpu-no-isolation, np-gpu-core, 2 nodes each)",
        )  # fmt: skip
        p.add_argument("--timeout", type=float, default=240.0)
        p.add_argument(
            "--real-nodes",
            type=_real_nodes_arg,
            default=0,
            help="real kubelet nodes beside the kwok ones (0 or 1; root, containerd: `make realnode`)",
        )
        p.add_argument(
            "--nvidia-plugin",
            action="store_true",
            help="run NVIDIA's device plugin and config-manager on the real nodes (over the project's fake "
            "NVML: `make nvidia-plugin fake-nvml`) instead of the stand-in of ACK's",
        )
        p.add_argument(
            "--real-node-plugin",
            choices=("ack", "nvidia"),
            default="",
            help="with --nvidia-plugin: the plugin the real nodes start with (default nvidia); ack: the "
            "stand-in of ACK's, NVIDIA's plugin installed beside it for nodes labelled "
            "nvidia.com/gpu.present=true outside ACK pools (docs/concepts/backends.md)",
        )
        p.add_argument(
            "--agent-image",
            default="",
            help="with --nvidia-plugin: the product's image archive (make image-local) to run the node "
            "agent on the real nodes, reading the fake NVML through pynvml",
        )
        p.add_argument(
            "--mig-manager",
            action="store_true",
            help="with --nvidia-plugin: NVIDIA's MIG manager on the real nodes as the GPU Operator deploys "
            "it (make mig-parted realnode-bins), the real nodes at nvidia.com/mig.config=all-disabled",
        )
        p.add_argument(
            "--crd", action="append", default=[], help="CRD file to install (default: crds/*.yaml if present)"
        )
        p.set_defaults(func=fn)
    for name, fn in (("down", cmd_down), ("env", cmd_env)):
        p = sub.add_parser(name)
        p.add_argument("--dir", default=DEFAULT_DIR)
        p.set_defaults(func=fn)
    args = parser.parse_args(argv)
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
