"""``make demo`` end to end: hack/demo.sh up, its output, then hack/demo.sh down leaves nothing running.

The demo gets its own state directory (its own control plane on its own free ports), so it never
touches the session-scoped test cluster.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from support.alerts import report

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "demo.sh"
VENV_BIN = Path(sys.executable).parent

# The example pools' label mapping (docs/concepts/ack-labels.md):
# nodepool -> cgpu, cgpu.disable.isolation, ack.node.gpu.schedule, ack.node.gpu.placement, gpushare.io/pool
EXPECTED_LABELS = {
    "np-cgpu": ("true", "false", "cgpu", "binpack", "cgpu"),
    "np-cgpu-no-isolation": ("true", "true", "share", "binpack", "cgpu-no-isolation"),
    "np-gpu-core": ("true", "false", "core_mem", "binpack", "gpu-core"),
}


#: The demo's real-node parts (an ACK pool, then the moves to an NVIDIA pool and a MIG pool) run unless the
#: real-node tier is off (``make test REAL_NODES=0``); run it under the real node's lock.
REAL_NODES = os.environ.get("GPUSHARE_REAL_NODES") != "0"


def _env(demo_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    env.update(
        DEMO_REAL_NODES="1" if REAL_NODES else "0",
        DEMO_DIR=str(demo_dir),
        VENV=str(VENV_BIN.parent),
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and int(proc.name) != os.getpid():
            found.append(f"{proc.name}: {cmdline[:200]}")
    return found


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


#: The demo's Prometheus targets: the apiserver, and the operator's and the webhook's processes
#: (``gpushare run``, ``gpushare webhook``) as the two endpoints the ServiceMonitor names.
WANTED_TARGETS = [
    ("apiserver", "", "up"),
    ("gpushare-operator", "metrics", "up"),
    ("gpushare-operator", "webhook-metrics", "up"),
]


def _section(out: str, heading: str) -> str:
    """The output of the step whose one-line explanation starts with ``heading``."""
    start = out.index(f"# {heading}")
    end = out.find("\n# ", start + 1)
    return out[start : end if end != -1 else len(out)]


def _assert_real_node_parts(out: str) -> None:
    """Part 3 (the real node in ACK pool real), part 4 (the real node moved to NVIDIA pool
    real-nvidia: the agent's GPUs through pynvml, 4 x 2 slots, NVIDIA's plugin only, a pod's UUID)
    and part 5 (moved on to MIG pool real-mig: the profiles advertised, a pod's MIG UUID)."""
    assert "demo: no real node" not in out and "demo: no NVIDIA pool" not in out, out[:3000]
    ack_env = _section(out, "Its environment, from the device plugin's Allocate answer")
    assert "ALIYUN_COM_GPU_MEM_CONTAINER=4" in ack_env, ack_env

    agent = _section(out, "The node agent's inventory of the real node")
    assert re.search(r"^realnode-0\s.*\s2\s+NVIDIA-A100-SXM4-40GB\s+40960\s*$", agent, re.M), agent
    moved = _section(out, "The real node now")
    row = next(line.split() for line in moved.splitlines() if line.startswith("realnode-0"))
    # NAME POOL CONFIG CGPU SCHEDULE NVIDIA-GPU: ACK's labels as before the ACK pool, 4 x 2 GPUs
    assert row[1] == "real-nvidia" and row[2].startswith("gpushare-ts4-"), row
    assert row[3:] == ["<none>", "default", "8"], row
    nvidia_pods = _section(out, "The device plugin pods on the real node: NVIDIA's only")
    assert re.search(
        r"^nvidia-device-plugin\s+nvidia-device-plugin-\S+\s+2/2\s+Running\s", nvidia_pods, re.M
    ), nvidia_pods
    ack_pods = _section(out, "ACK's stand-in plugin pods on the real node: none")
    assert "No resources found" in ack_pods, ack_pods
    env = _section(out, "Its environment, from NVIDIA's plugin's Allocate answer")
    assert re.search(r"NVIDIA_VISIBLE_DEVICES=GPU-fa4e0000-0000-4000-8000-00000000000[01]\s", env), env
    assert not re.search(r"^env ALIYUN_COM_GPU_MEM", env, re.M), env  # ACK's variables: not ACK's plugin

    # Part 5: pool real-mig on NVIDIA's MIG manager; per GPU 3g.20gb + 2g.10gb + 2 x 1g.5gb, 2 GPUs
    assert "demo: no MIG pool" not in out, out[:3000]
    mig = _section(out, "The real node in the MIG pool")
    row = next(line.split() for line in mig.splitlines() if line.startswith("realnode-0"))
    # NAME POOL MIG-CONFIG STATE MIG-1G.5GB MIG-2G.10GB MIG-3G.20GB NVIDIA-GPU
    assert row[1] == "real-mig" and row[2].startswith("gpushare-mig-") and row[3] == "success", row
    assert row[4:7] == ["4", "2", "2"] and row[7] in ("0", "<none>"), row
    mig_env = _section(out, "Its environment, from NVIDIA's plugin's Allocate answer: one MIG device's UUID")
    assert re.search(r"NVIDIA_VISIBLE_DEVICES=MIG-[0-9a-f-]{36}\s", mig_env), mig_env


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.CompletedProcess[str], Path]]:
    demo_dir = tmp_path_factory.mktemp("demo")
    env = _env(demo_dir)
    try:
        up = subprocess.run(
            ["bash", str(SCRIPT), "up"], cwd=REPO, env=env, capture_output=True, text=True, timeout=1300
        )
        (demo_dir / "up.out").write_text(up.stdout)  # kept with the demo's logs (--basetemp)
        yield up, demo_dir
    finally:
        subprocess.run(["bash", str(SCRIPT), "down"], cwd=REPO, env=env, capture_output=True, timeout=120)


@pytest.mark.integration
@pytest.mark.timeout(1600)
def test_demo_up_shows_the_product_and_down_leaves_nothing(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    up, demo_dir = demo
    out = up.stdout
    assert up.returncode == 0, f"demo failed:\n{out[-4000:]}\n{up.stderr[-4000:]}"

    # the pools are Ready with all their nodes
    gsp = _section(out, "The pools:")
    for pool, mode in (("cgpu", "cgpu"), ("cgpu-no-isolation", "share"), ("gpu-core", "core_mem")):
        assert re.search(rf"^{re.escape(pool)}\s+{mode}\s+ack\s+2\s+2\s+AllNodesReady\s", gsp, re.M), gsp

    # labels before: none of ours; after: the mapping, per node pool
    before = _section(out, "The nodes' GPU-sharing labels BEFORE")
    after = _section(out, "The nodes' labels AFTER")
    node_rows = 0
    for line in before.splitlines():
        fields = line.split()
        if fields and fields[0].startswith("gpu-"):
            assert fields[-1] in EXPECTED_LABELS, line  # the nodepool id is the last column: nothing after it
    for line in after.splitlines():
        fields = line.split()
        if fields and fields[0].startswith("gpu-"):
            node_rows += 1
            assert tuple(fields[-5:]) == EXPECTED_LABELS[fields[-6]], line
    assert node_rows == 6, after

    # every device-plugin pod was replaced
    def plugin_pods(section: str) -> dict[str, str]:
        rows = [
            line.split() for line in section.splitlines() if line.startswith("gpushare-device-plugin-ds-")
        ]
        return {row[6]: row[0] for row in rows if row[6].startswith("gpu-")}  # kwok node -> pod name

    old = plugin_pods(_section(out, "The stand-in device plugin pods BEFORE"))
    new = plugin_pods(_section(out, "The device plugin pods AFTER"))
    assert sorted(old) == sorted(new) and len(old) == 6, (old, new)
    assert all(old[node] != new[node] for node in old), (old, new)

    # describe: conditions and the operator's Events
    describe = _section(out, "A pool in detail")
    assert "AllNodesReady" in describe and "Events:" in describe, describe
    assert "LabelsApplied" in describe.split("Events:")[1] and "DevicePluginRestarted" in describe, describe

    # seed jobs admitted (one with the GS010 warning), each on its pool's nodes
    jobs = _section(out, "Submit the seed jobs")
    for job in ("cgpu-test", "cgpu-test-no-isolation", "cuda-sample"):
        assert f"job.batch/{job} created" in jobs, jobs
    assert "GS010-no-isolation-sizing" in jobs, jobs
    pods = _section(out, "Where each seed job ran")
    for prefix, node in (
        ("cgpu-test-no-isolation-", "gpu-shared-"),
        ("cgpu-test-", "gpu-cgpu-"),
        ("cuda-sample-", "gpu-core-"),
    ):
        row = next(line for line in pods.splitlines() if re.match(rf"{prefix}[a-z0-9]{{5}}\s", line))
        assert f" {node}" in row, row

    # the 33 % job is rejected with the webhook's message, and the demo carried on
    bad = _section(out, "Submit a bad job asking for 33 %")
    assert 'admission webhook "validate-jobs.gpushare.io" denied the request' in bad, bad
    assert "is not a multiple of 5 (rule GS001-core-percentage-step); use 30 or 35" in bad, bad

    # the operator stopped: a plain Deployment is admitted, the 33 % job is denied by the policy
    web = _section(out, "Webhook down: a Deployment without GPU requests is admitted")
    assert "deployment.apps/web created" in web, web
    held = _section(out, "Webhook down: the 33 % job is still denied")
    assert "ValidatingAdmissionPolicy 'gpushare-stateless-rules.gpushare.io'" in held, held
    assert "is not a multiple of 5 (rule GS001-core-percentage-step); use 30 or 35" in held, held
    # a bare Pod too: the local webhook fails open, so the demo installs the Pods policy as well
    bare = _section(out, "Webhook down: a bare Pod asking for 33 % is denied too")
    assert "ValidatingAdmissionPolicy 'gpushare-stateless-rules-pods.gpushare.io'" in bare, bare
    assert "is not a multiple of 5 (rule GS001-core-percentage-step); use 30 or 35" in bare, bare
    assert "webhook answering again" in out

    inspect = _section(out, "gpushare inspect")
    assert "POOL gpu-core  mode=core_mem" in inspect and "ready=True (AllNodesReady)" in inspect, inspect
    # labelled mode, what the (simulated) plugin advertises, isolation, GPUs, gpu-mem (16160 MiB: 15 GiB)
    assert re.search(r"gpu-cgpu-0\s+cgpu\s+cgpu\|share\s+active\s+1\s+0/15", inspect), inspect
    assert re.search(r"gpu-core-0\s+core_mem\s+core_mem\s+active\s+2\s+0/44\s+0/200", inspect), inspect

    # Part 2: cgpu -> core_mem. Labels alone change nothing; gpu-core comes only with a new plugin.
    def gpu_rows(section: str) -> dict[str, list[str]]:
        return {
            line.split()[0]: line.split() for line in section.splitlines() if line.startswith("gpu-cgpu-")
        }

    before_switch = gpu_rows(_section(out, "The np-cgpu nodes now"))
    stale = gpu_rows(_section(out, "Labelled core_mem, but the plugins still advertise"))
    fresh = gpu_rows(_section(out, "The new plugins read core_mem at start"))
    assert sorted(before_switch) == sorted(stale) == sorted(fresh) == ["gpu-cgpu-0", "gpu-cgpu-1"]
    for node in fresh:
        # NAME SCHEDULE GPU-MEM GPU-COUNT GPU-CORE% PLUGIN-SAW
        assert before_switch[node][1:5] == ["cgpu", "15", "1", "0"], before_switch[node]
        assert stale[node][1:5] == ["core_mem", "15", "1", "0"], stale[node]
        assert stale[node][5] == before_switch[node][5], "no plugin restart, nothing re-read"
        assert fresh[node][1:5] == ["core_mem", "15", "1", "100"], fresh[node]
        assert '"mode":"core_mem"' in fresh[node][5]
    not_ready = _section(out, "The pool does not claim Ready")
    assert "ready=False (NodesNotReady)" in not_ready and "PluginRestartNeeded" in not_ready, not_ready
    assert re.search(r"gpu-cgpu-1\s+core_mem\s+cgpu\|share\s", not_ready), not_ready
    pending = _section(out, "It stays Pending")
    assert re.search(
        r"core-on-np-cgpu-\S+\s+Pending\s+<none>\s.*Insufficient aliyun.com/gpu-core.percentage", pending
    ), pending
    ran = _section(out, "Where it ran")
    row = next(line for line in ran.splitlines() if line.startswith("core-on-np-cgpu-"))
    assert "Completed" in row and " gpu-cgpu-" in row, row

    assert f"export KUBECONFIG={demo_dir}/kubeconfig" in out

    if REAL_NODES:
        _assert_real_node_parts(out)

    # while it runs: the operator and the control plane are up, on the demo's own ports
    # two processes, as the chart's two containers: the operator and the webhook
    operator_pid = int((demo_dir / "operator.pid").read_text())
    webhook_pid = int((demo_dir / "webhook.pid").read_text())
    assert operator_pid != webhook_pid
    os.kill(operator_pid, 0)
    os.kill(webhook_pid, 0)
    op_argv = Path(f"/proc/{operator_pid}/cmdline").read_bytes().split(b"\0")
    wh_argv = Path(f"/proc/{webhook_pid}/cmdline").read_bytes().split(b"\0")
    assert b"run" in op_argv and b"--webhook" not in op_argv, op_argv
    assert b"webhook" in wh_argv and b"run" not in wh_argv, wh_argv
    ports = list(json.loads((demo_dir / "cluster.json").read_text())["ports"].values())
    webhook = re.search(r"admission webhook on https://127\.0\.0\.1:(\d+)", out)
    metrics = re.search(r"metrics http://127\.0\.0\.1:(\d+)/metrics", out)
    assert webhook and metrics, out
    ports += [int(webhook.group(1)), int(metrics.group(1))]
    assert all(_listening(p) for p in ports), ports

    # the demo's Prometheus: the shipped rule groups, the operator and the API server scraped
    prom = re.search(r"^Prometheus (http://127\.0\.0\.1:(\d+)) ", out, re.M)
    assert prom, out
    url = prom.group(1)
    ports.append(int(prom.group(2)))
    with urllib.request.urlopen(f"{url}/api/v1/rules", timeout=10) as resp:
        groups = json.loads(resp.read())["data"]["groups"]
    shipped = yaml.safe_load((REPO / "manifests" / "monitoring" / "prometheusrule.yaml").read_text())
    assert {g["name"]: [r["name"] for r in g["rules"]] for g in groups} == {
        g["name"]: [r["alert"] for r in g["rules"]] for g in shipped["spec"]["groups"]
    }
    deadline = time.monotonic() + 30  # the operator was restarted last: its next scrape, 5s apart
    while True:
        with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=10) as resp:
            targets = json.loads(resp.read())["data"]["activeTargets"]
        health = sorted((t["labels"]["job"], t["labels"].get("endpoint", ""), t["health"]) for t in targets)
        if health == WANTED_TARGETS or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert health == WANTED_TARGETS, targets
    report(
        ".demo-prometheus",
        "\n".join(
            [f"/api/v1/rules: group {g['name']}: {', '.join(r['name'] for r in g['rules'])}" for g in groups]
            + [f"/api/v1/targets: {t['scrapeUrl']} {t['health']} {json.dumps(t['labels'])}" for t in targets]
        ),
    )
    report(".demo-panels", _section(out, "The dashboard's queries").strip())
    panels = re.search(r"^dashboard panels: (\d+)/(\d+) return data", out, re.M)
    assert panels and int(panels.group(2)) >= 19 and int(panels.group(1)) > 0, out
    # Every panel either returned data over the demo or says why nothing in the demo feeds it.
    rows = re.findall(r"^  (data |EMPTY) (.+: series per query \[.*)$", out, re.M)
    assert len(rows) == int(panels.group(2)), rows
    unexplained = [row for mark, row in rows if mark == "EMPTY" and "(empty by design: " not in row]
    assert not unexplained, unexplained

    down = subprocess.run(
        ["bash", str(SCRIPT), "down"],
        cwd=REPO,
        env=_env(demo_dir),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert down.returncode == 0, down.stderr
    assert "stopped the operator" in down.stderr and "stopped the cluster" in down.stderr, down.stderr
    assert "stopped the webhook" in down.stderr, down.stderr
    assert "stopped prometheus" in down.stderr, down.stderr
    # `down` returns once the operator and the supervisor are gone; their children die with them
    deadline = time.monotonic() + 10
    while (
        _processes_mentioning(str(demo_dir)) or any(map(_listening, ports))
    ) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_mentioning(str(demo_dir)) == []
    assert [p for p in ports if _listening(p)] == []
    assert not (demo_dir / "operator.pid").exists() and not (demo_dir / "webhook.pid").exists()
