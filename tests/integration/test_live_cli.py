"""`gpushare plan` and `gpushare check` against the live cluster (read through the kubeconfig).

The CLI runs as a subprocess (also as `kubectl gpushare plan`), as an administrator would run it;
the test's own client sets up pools, nodes and pods. No operator runs here, so nothing changes
the nodes between the test's writes and the CLI's reads.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes_asyncio import client

from gpushare import constants as c
from gpushare.devcluster import ClusterInfo, wait_for
from gpushare.devcluster.fakes import POOL_LABEL, FakeNodeSet

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]


def _cli(
    cluster: ClusterInfo | None, *args: str, kubeconfig: str | None = None
) -> subprocess.CompletedProcess[str]:
    config = kubeconfig or (str(cluster.kubeconfig) if cluster else "")
    return subprocess.run(
        [sys.executable, "-m", "gpushare", *args, "--kubeconfig", config],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _pool_body(name: str, np: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {POOL_LABEL: np}}, **spec},
    }


def _gpu_pod(name: str, node: str, mem: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {"name": "cuda", "image": "cuda-sample", "resources": {"limits": {c.RES_GPU_MEM: str(mem)}}}
            ],
        },
    }


def _nodes_of(data: dict[str, Any], names: list[str]) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in data["nodes"] if n["node"] in names}


async def _plugin_pods_on(api: client.ApiClient, nodes: list[str]) -> bool:
    pods = await client.CoreV1Api(api).list_namespaced_pod(
        c.DEFAULT_PLUGIN_NAMESPACE, label_selector="name=gpushare-device-plugin-ds"
    )
    return set(nodes) <= {p.spec.node_name for p in pods.items}


async def test_plan_previews_apply_and_delete_against_the_cluster(
    cluster: ClusterInfo, api: client.ApiClient, fake_nodes: FakeNodeSet, namespace: str, tmp_path: Path
) -> None:
    np = f"np-live-{secrets.token_hex(3)}"
    name = f"live-{secrets.token_hex(3)}"
    n0, n1 = await fake_nodes.create(2, pool_labels={POOL_LABEL: np}, gpus_per_node=1, gpu_mem_gib_per_gpu=15)
    await wait_for(
        lambda: _plugin_pods_on(api, [n0, n1]), what="device plugin pods on the new nodes", timeout_s=120
    )
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    created = await custom.create_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, _pool_body(name, np))
    try:
        # 1. The stored pool, not applied yet (no operator): plan without -f shows what it would do.
        now = await asyncio.to_thread(_cli, cluster, "plan", "-o", "json")
        assert now.returncode == 0, now.stderr
        data = json.loads(now.stdout)
        assert data["pools"] == []
        nodes = _nodes_of(data, [n0, n1])
        assert {n["action"] for n in nodes.values()} == {"Apply"}
        assert {x["key"]: x["to"] for x in nodes[n0]["labels"]}[c.LABEL_SCHEDULE] == "cgpu"
        assert nodes[n0]["restartPlugin"] and nodes[n0]["pluginPods"], "plugin pods are read live"

        # Make the cluster look applied: write what the plan says (labels + ownership annotation).
        for node in (n0, n1):
            patch = {
                "metadata": {
                    "labels": {x["key"]: x["to"] for x in nodes[node]["labels"]},
                    "annotations": nodes[node]["annotations"],
                }
            }
            await core.patch_node(node, patch)

        # 2. -f with a changed spec while a GPU pod runs on n0: the spec diff, and the mode switch
        # (cgpu -> share) held on n0 by the live pod, applied on the idle n1.
        await core.create_namespaced_pod(namespace, cast(Any, _gpu_pod("train", n0, 4)))
        changed = tmp_path / "pool.yaml"
        changed.write_text(yaml.safe_dump(_pool_body(name, np, memoryIsolation=False, placement="spread")))
        proc = await asyncio.to_thread(_cli, cluster, "plan", "-f", str(changed), "-o", "json")
        assert proc.returncode == 0, proc.stderr
        data = json.loads(proc.stdout)
        (pool,) = data["pools"]
        assert (pool["name"], pool["change"]) == (name, "update")
        assert pool["fields"] == [
            {"path": "spec.memoryIsolation", "from": True, "to": False},
            {"path": "spec.placement", "from": "binpack", "to": "spread"},
        ]
        nodes = _nodes_of(data, [n0, n1])
        assert nodes[n0]["action"] == "Hold"
        assert nodes[n0]["blockingPods"] == [f"{namespace}/train"]
        assert nodes[n1]["action"] == "Apply"
        assert {x["key"]: x["to"] for x in nodes[n1]["labels"]}[c.LABEL_SCHEDULE] == "share"

        text = await asyncio.to_thread(_cli, cluster, "plan", "-f", str(changed))
        assert text.returncode == 0, text.stderr
        lines = text.stdout.splitlines()
        assert lines[0].startswith(f"live: {cluster.server}: ")
        assert f"{c.KIND}/{name}: would be configured" in lines
        assert "    spec.memoryIsolation: true -> false" in lines
        assert f"    blocking pod: {namespace}/train ({c.RES_GPU_MEM}=4)" in lines

        # 3. The same through the kubectl plugin (kubectl finds kubectl-gpushare on PATH).
        kubectl = shutil.which("kubectl")
        assert kubectl is not None, "kubectl is not installed"
        env = {
            **os.environ,
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "KUBECONFIG": str(cluster.kubeconfig),
        }
        plugin = await asyncio.to_thread(
            subprocess.run, [kubectl, "gpushare", "plan", "-f", str(changed)],
            capture_output=True, text=True, timeout=120, check=False, env=env,
        )  # fmt: skip
        assert plugin.returncode == 0, plugin.stderr
        assert f"{c.KIND}/{name}: would be configured" in plugin.stdout.splitlines()

        # 4. --delete: the idle node goes back to what it had (cleanup Restore); n0 would switch
        # cgpu -> default under the running pod, so it is held like any other mode switch.
        gone = await asyncio.to_thread(_cli, cluster, "plan", "--delete", name, "-o", "json")
        assert gone.returncode == 0, gone.stderr
        data = json.loads(gone.stdout)
        assert data["pools"] == [{"name": name, "change": "delete", "fields": []}]
        nodes = _nodes_of(data, [n0, n1])
        assert nodes[n1]["action"] == "Restore"
        assert {x["key"]: x["to"] for x in nodes[n1]["labels"]}[c.LABEL_SCHEDULE] == "default"
        assert nodes[n1]["annotations"][c.ANNOTATION_OWNED] is None
        assert (nodes[n0]["action"], nodes[n0]["blockingPods"]) == ("Hold", [f"{namespace}/train"])
        unknown = await asyncio.to_thread(_cli, cluster, "plan", "--delete", "no-such-pool")
        assert unknown.returncode == 2
        assert unknown.stderr.strip() == (
            f"gpushare plan: error: --delete no-such-pool: no such {c.KIND} in the cluster or -f"
        )

        # Read-only: the CLI changed nothing.
        stored = await custom.get_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, name)
        assert stored["spec"] == created["spec"]
        assert stored["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
        assert (await core.read_node(n1)).metadata.labels[c.LABEL_SCHEDULE] == "cgpu"
    finally:
        await custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, name)


async def test_check_uses_the_live_pools_and_nodes(
    cluster: ClusterInfo, api: client.ApiClient, fake_nodes: FakeNodeSet, tmp_path: Path
) -> None:
    np = f"np-chk-{secrets.token_hex(3)}"
    name = f"chk-{secrets.token_hex(3)}"
    await fake_nodes.create(1, pool_labels={POOL_LABEL: np}, gpus_per_node=2, gpu_mem_gib_per_gpu=15)
    custom = client.CustomObjectsApi(api)
    await custom.create_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, _pool_body(name, np))
    try:
        job = tmp_path / "job.yaml"
        job.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": "too-big", "namespace": "default"},
                    "spec": {
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "nodeSelector": {POOL_LABEL: np},
                                "containers": [
                                    {
                                        "name": "cuda",
                                        "image": "cuda-sample",
                                        "resources": {"limits": {c.RES_GPU_MEM: "20"}},
                                    }
                                ],
                            }
                        }
                    },
                }
            )
        )
        live = await asyncio.to_thread(_cli, cluster, "check", "-f", str(job), "-o", "json")
        assert live.returncode == 1, live.stdout + live.stderr
        rules = {f["rule_id"] for f in json.loads(live.stdout)}
        assert "GS005-mem-exceeds-gpu" in rules, live.stdout  # needs the live node's 15 GiB GPUs

        offline = await asyncio.to_thread(_cli, cluster, "check", "--offline", "-f", str(job), "-o", "json")
        assert "GS005-mem-exceeds-gpu" not in {f["rule_id"] for f in json.loads(offline.stdout)}
    finally:
        await custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_missing_unreachable_and_refused_kubeconfig_one_line_exit_2(
    cluster: ClusterInfo, tmp_path: Path
) -> None:
    job = str(REPO / "examples" / "job-cuda-sample.yaml")
    pool = str(REPO / "examples" / "pool-cgpu.yaml")
    missing = tmp_path / "missing.yaml"

    conf = yaml.safe_load(cluster.kubeconfig.read_text())
    down = f"https://127.0.0.1:{_free_port()}"
    conf["clusters"][0]["cluster"]["server"] = down
    unreachable = tmp_path / "unreachable.yaml"
    unreachable.write_text(yaml.safe_dump(conf))

    conf = yaml.safe_load(cluster.kubeconfig.read_text())
    for user in conf["users"]:
        user["user"] = {"token": "not-a-valid-token"}
    refused = tmp_path / "refused.yaml"
    refused.write_text(yaml.safe_dump(conf))

    cases = [
        (str(missing), f"kubeconfig '{missing}' does not exist (pass --kubeconfig or set KUBECONFIG)"),
        (str(unreachable), f"cannot reach the API server {down}: "),
        (str(refused), f"API server {cluster.server}: list {c.PLURAL}: HTTP 401 Unauthorized"),
    ]
    for config, message in cases:
        for args in (["plan", "-f", pool], ["check", "-f", job]):
            proc = _cli(None, *args, kubeconfig=config)
            err = proc.stderr.strip()
            assert proc.returncode == 2, (args, config, proc.stdout, err)
            assert len(err.splitlines()) == 1 and "Traceback" not in err, err
            assert err.startswith(f"gpushare {args[0]}: error: "), err
            assert message in err, (message, err)
            assert proc.stdout == ""
