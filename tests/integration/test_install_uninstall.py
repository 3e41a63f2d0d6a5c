"""Install, first use and uninstall as a new user does them, on real control planes.

* README's kustomize install and uninstall blocks (the same, written the same, wherever the
  site's getting-started pages show them), run as written: `kubectl delete -k manifests/`
  exits 0, leaves nothing Terminating, and keeps the CRDs and every pool (the CRDs are
  manifests/crd alone); pool writes while no webhook answers are admitted (the pools' webhook
  fails open) and still checked by the CRD's CEL rules, GPU workloads still fail closed.
* A development run (`gpushare run --webhook --webhook-local`) says in one line when its
  namespace is missing; stopped, it leaves nothing that refuses a GPU job or fails a later
  `helm install`; killed with SIGKILL, its leftover configuration refuses nothing (local mode
  fails open).
* The first-use transcript of the site's getting-started pages (a first pool, then a first job) on
  `make cluster` (python -m gpushare.devcluster up): the examples' pools match its nodes, and every
  command prints what the pages show.

Each test starts its own cluster: the shipped webhook configuration fails closed for GPU pods
and must not leak into the shared session cluster.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpushare import constants as c
from gpushare.devcluster import ClusterInfo, DevCluster
from gpushare.devcluster.cluster import free_port
from gpushare.devcluster.crds import install_crd_files
from gpushare.devcluster.fakes import POOL_LABEL, create_gpu_nodes
from gpushare.k8s.client import make_api_client

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
GETTING_STARTED = REPO / "docs" / "getting-started"
#: The pages whose `text` blocks starting with `$ ` are the first use, run in this order.
FIRST_USE = [GETTING_STARTED / "first-pool.md", GETTING_STARTED / "first-job.md"]
NS = "gpushare-system"
VWC = "gpushare-webhook"
SECRET = "gpushare-webhook-tls"
BIN = str(Path(sys.executable).parent)  # gpushare (the venv's) on PATH, as README assumes


def _console_blocks(page: str) -> list[str]:
    return re.findall(r"^```console\n(.*?)^```", page, flags=re.S | re.M)


def _commands(block: str) -> list[str]:
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def _block_with(text: str) -> list[str]:
    """The commands (comments stripped) of README's console block that contains ``text``; a
    getting-started page that shows a block with ``text`` must show the same commands."""
    (block,) = [b for b in _console_blocks(README) if text in b]
    for page in sorted(GETTING_STARTED.glob("*.md")):
        for other in _console_blocks(page.read_text()):
            if text in other:
                assert _commands(other) == _commands(block), f"{page.name} and README differ on {text!r}"
    return _commands(block)


class Shell:
    def __init__(self, info: ClusterInfo) -> None:
        self.info = info
        self.env = {**os.environ, "KUBECONFIG": str(info.kubeconfig), "PATH": f"{BIN}:{os.environ['PATH']}"}

    def run(
        self, command: str, *, check: bool = True, timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command], cwd=REPO, env=self.env,
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        if check and proc.returncode != 0:
            pytest.fail(f"{command!r} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["kubectl", *args], env=self.env, capture_output=True, text=True, timeout=120
        )  # fmt: skip
        if check and proc.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def exists(self, *ref: str) -> bool:
        return bool(self.kubectl("get", *ref, "-o", "name", "--ignore-not-found").stdout.strip())

    def apply(self, obj: dict[str, Any], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["kubectl", "create", "-f", "-"], input=json.dumps(obj), env=self.env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if check and proc.returncode != 0:
            pytest.fail(f"kubectl create {obj['kind']} failed:\n{proc.stderr}")
        return proc


def _until(check: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g}s waiting for {what} (last: {got!r})")
        time.sleep(0.5)


@pytest.fixture
def fresh(cluster: ClusterInfo) -> Iterator[Shell]:
    """A cluster of its own with three fake GPU nodes (``cluster`` fails clearly without binaries)."""
    dev = DevCluster()
    info = dev.start()

    async def nodes() -> None:
        async with await make_api_client(str(info.kubeconfig)) as api:
            await create_gpu_nodes(api, 3, prefix="u", pool_labels={POOL_LABEL: "np-gpu-core"})

    try:
        asyncio.run(nodes())
        yield Shell(info)
    finally:
        dev.stop()


def _pool(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{c.GROUP}/{c.VERSION}",
        "kind": c.KIND,
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {POOL_LABEL: f"np-{name}"}}, **spec},
    }


def _gpu_pod(name: str) -> dict[str, Any]:
    """A GPU pod the stateless rules accept: only the webhook (the stateful rules) can refuse it."""
    limits = {"aliyun.com/gpu-mem": "2"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeSelector": {POOL_LABEL: "np-nowhere"},
            "containers": [{"name": "c", "image": "registry.invalid/x:1", "resources": {"limits": limits}}],
        },
    }


def _terminating(sh: Shell) -> list[str]:
    out = []
    for kind in ("crd", "gsp", "namespaces", "clusterkopfpeerings"):
        got = sh.kubectl("get", kind, "-o", "json", check=False)
        if got.returncode != 0 and "NotFound" in got.stderr:  # the CRD itself is gone
            continue
        items = json.loads(got.stdout)["items"]
        out += [f"{kind}/{i['metadata']['name']}" for i in items if i["metadata"].get("deletionTimestamp")]
    return out


# --- kustomize: README's install and uninstall blocks, as written ---------------------------------


def test_readme_kustomize_uninstall_keeps_the_pools_and_exits_0(fresh: Shell) -> None:
    sh = fresh
    install = _block_with("kubectl apply --server-side -k manifests/crd")
    uninstall = _block_with("kubectl delete -k manifests/")
    assert uninstall[0] == "kubectl delete gsp --all" and uninstall[1] == "kubectl delete -k manifests/"
    for command in install:  # the first pool of README is applied while no webhook can answer
        sh.run(command)
    hooks = {
        h["name"]: h
        for h in json.loads(sh.kubectl("get", "validatingwebhookconfiguration", VWC, "-o", "json").stdout)[
            "webhooks"
        ]
    }
    assert hooks["validate-gpusharepools.gpushare.io"]["failurePolicy"] == "Ignore"
    assert hooks["validate-pods.gpushare.io"]["failurePolicy"] == "Fail"

    # No webhook answers (kwok runs no container): pool writes are admitted, the operator's own
    # (its finalizer) included, and the CRD's CEL rules still refuse an invalid pool.
    sh.apply(_pool("team", memoryIsolation=True))
    sh.kubectl(
        "patch", "gsp", "team", "--type=merge", "-p", json.dumps({"metadata": {"finalizers": [c.FINALIZER]}})
    )
    bad = sh.apply(_pool("bad", computeAllocation=True, memoryIsolation=False), check=False)
    assert bad.returncode != 0
    assert "computeAllocation: true requires memoryIsolation: true" in bad.stderr, bad.stderr
    # GPU workloads keep failing closed: only the webhook checks their pool targeting.
    refused = sh.apply(_gpu_pod("needs-webhook"), check=False)
    assert refused.returncode != 0 and 'failed calling webhook "validate-pods.gpushare.io"' in refused.stderr

    # The trap: the operator uninstalled with pools left (step 1 skipped). Nothing is lost.
    out = sh.run(uninstall[1])
    assert out.returncode == 0, out.stderr
    assert "NotFound" not in out.stderr and "error" not in out.stderr.lower(), out.stderr
    assert sh.exists("crd", "gpusharepools.gpushare.io") and sh.exists("crd", "clusterkopfpeerings.kopf.dev")
    pools = json.loads(sh.kubectl("get", "gsp", "-o", "json").stdout)["items"]
    assert {p["metadata"]["name"] for p in pools} == {"gpu-core", "team"}
    assert _terminating(sh) == []
    assert not sh.exists("namespace", NS) and not sh.exists("validatingwebhookconfiguration", VWC)
    _until(  # nothing is left to refuse GPU pods (once the apiserver has dropped the configuration)
        lambda: sh.apply(_gpu_pod("after-uninstall"), check=False).returncode == 0, "a GPU pod to be admitted"
    )

    # Installed again, the pools are still there; then the documented order, to the end.
    for command in install[:3]:
        sh.run(command)
    assert sh.exists("gsp", "team") and sh.exists("gsp", "gpu-core")
    sh.kubectl(
        "patch", "gsp", "team", "--type=merge", "-p", '{"metadata":{"finalizers":null}}'
    )  # as the operator
    for command in uninstall:
        sh.run(command)
    assert _terminating(sh) == []
    assert not sh.exists("crd", "gpusharepools.gpushare.io") and not sh.exists("namespace", NS)


# --- the development run: one line without its namespace, nothing left behind ---------------------


def _dev_run(sh: Shell, tmp: Path, name: str) -> tuple[subprocess.Popen[bytes], Path, int]:
    log = tmp / f"{name}.log"
    port = free_port()
    cmd = [
        sys.executable, "-m", "gpushare", "run", "--kubeconfig", str(sh.info.kubeconfig),
        "--metrics-port", "0", "--log-format", "json",
        "--webhook", "--webhook-local", f"--webhook-port={port}", f"--webhook-cert-dir={tmp / name}",
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    return proc, log, port


def _webhook_answers(sh: Shell, port: int) -> bool:
    """The apiserver calls this run's webhook: a 33 % GPU pod is denied by it (no policy here)."""
    pod = _gpu_pod("probe-33")
    pod["spec"]["containers"][0]["resources"]["limits"].update({"aliyun.com/gpu-core.percentage": "33"})
    out = subprocess.run(
        ["kubectl", "create", "--dry-run=server", "-f", "-"], input=json.dumps(pod), env=sh.env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return 'admission webhook "validate-pods.gpushare.io" denied' in out.stderr and "GS001" in out.stderr


def _wait_answering(sh: Shell, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    _until(lambda: proc.poll() is not None or _webhook_answers(sh, port), "the dev webhook to answer", 90)
    assert proc.poll() is None, log.read_text()[-3000:]


def _wait_admitted(sh: Shell, name: str) -> None:
    _until(lambda: sh.apply(_gpu_pod(name), check=False).returncode == 0, f"GPU pod {name} to be admitted")


def test_a_stopped_development_run_leaves_nothing_that_blocks(
    fresh: Shell, tmp_path: Path, helm_bin: str
) -> None:
    sh = fresh

    async def crds() -> None:
        async with await make_api_client(str(sh.info.kubeconfig)) as api:
            await install_crd_files(api, sorted((REPO / "crds").glob("*.yaml")))

    asyncio.run(crds())

    # Without its namespace: one line, at once, exit 2 (no stream of 404s).
    proc, log, _ = _dev_run(sh, tmp_path, "no-namespace")
    assert proc.wait(timeout=60) == 2
    lines = log.read_text().strip().splitlines()
    assert lines == [
        f"gpushare run: error: namespace {NS} does not exist: the webhook keeps its certificate Secret "
        f"{SECRET} there; create it (kubectl create namespace {NS}) or pass --webhook-namespace NS"
    ], lines

    # As README's development section says: the namespace, then the run. Stopped with SIGINT
    # (Ctrl-C) or SIGTERM (kill, make demo-down) it deletes its configuration and Secret.
    sh.kubectl("create", "namespace", NS)
    for sig in (signal.SIGINT, signal.SIGTERM):
        proc, log, port = _dev_run(sh, tmp_path, f"dev-{sig.name}")
        try:
            _wait_answering(sh, proc, port, log)
            assert sh.exists("validatingwebhookconfiguration", VWC) and sh.exists("secret", SECRET, "-n", NS)
        finally:
            proc.send_signal(sig)
            assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
        assert not sh.exists("validatingwebhookconfiguration", VWC), (
            f"{sig.name}: the run left its configuration"
        )
        assert not sh.exists("secret", SECRET, "-n", NS), f"{sig.name}: the run left its Secret"
        assert "Local webhook stopped: deleted" in log.read_text()
        _wait_admitted(sh, f"after-{sig.name.lower()}")

    # Killed (no cleanup possible): the leftover configuration fails open, it refuses nothing.
    proc, log, port = _dev_run(sh, tmp_path, "killed")
    try:
        _wait_answering(sh, proc, port, log)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    hooks = json.loads(sh.kubectl("get", "validatingwebhookconfiguration", VWC, "-o", "json").stdout)[
        "webhooks"
    ]
    assert {h["failurePolicy"] for h in hooks} == {"Ignore"}
    _wait_admitted(sh, "after-kill")
    # docs/concepts/admission.md's removal of what a killed run leaves, then a later helm install works.
    sh.kubectl("delete", "validatingwebhookconfiguration", VWC)
    sh.kubectl("-n", NS, "delete", "secret", SECRET)
    chart = REPO / "charts" / "gpushare-operator"
    out = sh.run(f"{helm_bin} install gpushare {chart} --namespace {NS}")
    assert "ownership" not in out.stderr and "already installed" not in out.stderr, out.stderr
    # One release per cluster, said plainly instead of Helm's ownership error.
    second = sh.run(f"{helm_bin} install other {chart} --namespace default", check=False)
    assert second.returncode != 0
    assert (
        "gpushare is already installed in this cluster (ValidatingWebhookConfiguration gpushare-webhook "
        f"belongs to Helm release gpushare in namespace {NS})"
    ) in second.stderr, second.stderr


# --- the getting-started first use on `make cluster` -----------------------------------------------

#: What differs from one cluster to the next: the apiserver's port, the plugin pods' names.
_VOLATILE = [
    (re.compile(r"https://127\.0\.0\.1:\d+"), "https://127.0.0.1:PORT"),
    (re.compile(r"gpushare-device-plugin-ds-[a-z0-9]{5}"), "gpushare-device-plugin-ds-XXXXX"),
]


def _stable(text: str) -> str:
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    return text


def _first_use_transcript() -> list[tuple[str, list[str]]]:
    """The getting-started pages' ``text`` blocks of `$ ...` commands captured on make cluster,
    in order: (command, output)."""
    blocks = [
        b
        for page in FIRST_USE
        for b in re.findall(r"^```text\n(.*?)^```", page.read_text(), flags=re.S | re.M)
        if b.startswith("$ ")
    ]
    assert any("$ gpushare plan -f" in b for b in blocks), "the first-pool page lost its plan transcript"
    out: list[tuple[str, list[str]]] = []
    for line in "".join(blocks).splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        else:
            out[-1][1].append(line)
    return out


def test_readme_first_use_runs_as_written_on_make_cluster(cluster: ClusterInfo, tmp_path: Path) -> None:
    d = tmp_path / "cl"
    up = subprocess.run(
        [sys.executable, "-m", "gpushare.devcluster", "up", "--dir", str(d)],
        cwd=REPO, capture_output=True, text=True, timeout=330,
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    info = ClusterInfo.from_json((d / "cluster.json").read_text())
    sh = Shell(info)
    run = [sys.executable, "-m", "gpushare", "run", f"--kubeconfig={info.kubeconfig}", "--metrics-port=0"]
    with (tmp_path / "operator.log").open("wb") as log:
        operator = subprocess.Popen(run, stdout=log, stderr=subprocess.STDOUT)
    try:
        # make cluster's node pools are the ones every example pool selects.
        escaped = POOL_LABEL.replace(".", "\\.")
        nodepools = sh.kubectl("get", "nodes", "-o", f"jsonpath={{.items[*].metadata.labels.{escaped}}}")
        for example in ("pool-cgpu.yaml", "pool-cgpu-no-isolation.yaml", "pool-gpu-core.yaml"):
            text = (REPO / "examples" / example).read_text()
            (wanted,) = re.findall(rf"{re.escape(POOL_LABEL)}: (\S+)", text)
            assert nodepools.stdout.split().count(wanted) == 2, (example, nodepools.stdout)
        for command, expected in _first_use_transcript():
            # Both streams, as a terminal shows them; through a pipe, what the pipe's reader
            # prints (whether the writer survives a closed pipe is the CLI's own test).
            proc = sh.run(command if "|" in command else f"exec 2>&1; {command}", check=False)
            got = proc.stdout.rstrip("\n").splitlines()
            assert [_stable(x) for x in got] == [_stable(x) for x in expected], command
    finally:
        operator.send_signal(signal.SIGINT)
        operator.wait(timeout=60)
        subprocess.run(
            [sys.executable, "-m", "gpushare.devcluster", "down", "--dir", str(d)],
            capture_output=True, timeout=120,
        )  # fmt: skip
