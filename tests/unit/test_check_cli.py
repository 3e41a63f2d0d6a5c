"""`gpushare check` on every example: in-process through gpushare.cli.main and as the console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpushare.cli import main

REPO = Path(__file__).resolve().parents[2]
EX = REPO / "examples"
POOLS = [EX / "pool-cgpu.yaml", EX / "pool-cgpu-no-isolation.yaml", EX / "pool-gpu-core.yaml"]
NODES = EX / "context" / "nodes.yaml"
MEM = "aliyun.com/gpu-mem"


def _context_args(with_nodes: bool = True) -> list[str]:
    args: list[str] = []
    for p in POOLS:
        args += ["--pools", str(p)]
    if with_nodes:
        args += ["--nodes", str(NODES)]
    return args


def run_check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict[str, Any]]]:
    code = main(["check", *args, "-o", "json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


#: example file -> exit code and [(object, rule id, verdict)], checked with the three seed pools and nodes.
EXPECTED: dict[str, tuple[int, list[tuple[str, str, str]]]] = {
    "pool-cgpu.yaml": (0, []),
    "pool-nvidia-time-slicing.yaml": (0, []),
    "pool-nvidia-mig.yaml": (0, []),
    # The getting-started first use on make cluster: a pool change to preview, and a job too big for one GPU.
    "first-use/pool-cgpu-spread.yaml": (0, []),
    "first-use/train-20gib.yaml": (1, [("Job/default/train", "GS005-mem-exceeds-gpu", "deny")]),
    "pool-cgpu-no-isolation.yaml": (0, []),
    "pool-gpu-core.yaml": (0, []),
    "job-cgpu-test.yaml": (0, []),
    "job-cuda-sample.yaml": (0, []),
    "job-cgpu-test-no-isolation.yaml": (
        0,
        [("Job/default/cgpu-test-no-isolation", "GS010-no-isolation-sizing", "warn")],
    ),
    "invalid/cuda-sample-33.yaml": (
        1,
        [("Job/default/cuda-sample-33", "GS001-core-percentage-step", "deny")],
    ),
    "invalid/cuda-sample-0.yaml": (1, [("Job/default/cuda-sample-0", "GS002-core-percentage-range", "deny")]),
    "invalid/cuda-sample-105.yaml": (
        1,
        [("Job/default/cuda-sample-105", "GS002-core-percentage-range", "deny")],
    ),
    "invalid/cuda-sample-core-without-mem.yaml": (
        1,
        [("Job/default/cuda-sample-no-mem", "GS003-core-without-mem", "deny")],
    ),
    "invalid/cuda-sample-2Gi.yaml": (
        1,
        [("Pod/default/cuda-sample-2gi", "GS004-mem-positive-integer", "deny")],
    ),
    "invalid/cuda-sample-20gib.yaml": (
        1,
        [("Pod/default/cuda-sample-20gib", "GS005-mem-exceeds-gpu", "deny")],
    ),
    "invalid/cgpu-test-no-node-selector.yaml": (
        1,
        [("Job/default/cgpu-test-no-selector", "GS007-pool-target-missing", "deny")],
    ),
    "invalid/cgpu-test-ambiguous.yaml": (
        1,
        [("Job/default/cgpu-test-ambiguous", "GS008-pool-target-ambiguous", "deny")],
    ),
    "invalid/memory-only-on-gpu-core.yaml": (
        1,
        [
            ("Job/default/memory-only-job", "GS009-pool-kind-mismatch", "deny"),
            ("Deployment/default/memory-only-deployment", "GS009-pool-kind-mismatch", "deny"),
            ("CronJob/default/memory-only-cronjob", "GS009-pool-kind-mismatch", "deny"),
        ],
    ),
    "invalid/job-gpu-count-8.yaml": (
        1,
        [("Job/default/gpu-count-8", "GS016-gpu-count-exceeds-node", "deny")],
    ),
    "invalid/pod-node-name.yaml": (1, [("Pod/default/pinned", "GS017-node-name-set", "deny")]),
    "invalid/pool-compute-without-isolation.yaml": (
        1,
        [("GPUSharePool/gpu-core-no-isolation", "GP002-pool-compute-without-isolation", "deny")],
    ),
    "invalid/pool-empty-selector.yaml": (
        1,
        [("GPUSharePool/everything", "GP003-pool-empty-selector", "deny")],
    ),
    "invalid/pool-bad-fields.yaml": (1, [("GPUSharePool/bad-fields", "GP001-pool-schema", "deny")]),
    "invalid/pool-overlap.yaml": (
        1,
        [
            ("GPUSharePool/wide", "GP004-pool-overlap", "deny"),
            ("GPUSharePool/wide", "GP004-pool-overlap", "deny"),
        ],
    ),
    # One example per workload kind of the kinds table, valid and invalid.
    "workloads/clusterworkflowtemplate.yaml": (0, []),
    "workloads/cronworkflow.yaml": (0, []),
    "workloads/inferenceservice.yaml": (0, []),
    "workloads/jobset.yaml": (0, []),
    "workloads/leaderworkerset.yaml": (0, []),
    "workloads/mpijob.yaml": (0, []),
    "workloads/paddlejob.yaml": (0, []),
    "workloads/pytorchjob.yaml": (0, []),
    "workloads/raycluster.yaml": (0, []),
    "workloads/rayjob.yaml": (0, []),
    "workloads/rayservice.yaml": (0, []),
    "workloads/tfjob.yaml": (0, []),
    "workloads/volcano-job.yaml": (0, []),
    "workloads/workflow.yaml": (0, []),
    "workloads/workflowtemplate.yaml": (0, []),
    "workloads/xgboostjob.yaml": (0, []),
    "invalid/workloads/clusterworkflowtemplate-no-selector.yaml": (
        1,
        [
            ("ClusterWorkflowTemplate/gpu-train-no-selector", "GS007-pool-target-missing", "deny"),
        ],
    ),
    "invalid/workloads/cronworkflow-on-gpu-core.yaml": (
        1,
        [
            ("CronWorkflow/default/nightly-train-core", "GS009-pool-kind-mismatch", "deny"),
        ],
    ),
    "invalid/workloads/inferenceservice-20gib.yaml": (
        1,
        [
            ("InferenceService/default/torchserve-20gib", "GS005-mem-exceeds-gpu", "deny"),
        ],
    ),
    "invalid/workloads/jobset-ambiguous.yaml": (
        1,
        [
            ("JobSet/default/jobset-train-ambiguous", "GS008-pool-target-ambiguous", "deny"),
        ],
    ),
    "invalid/workloads/leaderworkerset-split-core.yaml": (
        1,
        [
            ("LeaderWorkerSet/default/vllm-core", "GS013-gpu-count-split", "deny"),
            ("LeaderWorkerSet/default/vllm-core", "GS013-gpu-count-split", "deny"),
        ],
    ),
    "invalid/workloads/mpijob-uneven.yaml": (
        1,
        [
            ("MPIJob/default/mpi-pi-uneven", "GS013-gpu-count-split", "deny"),
        ],
    ),
    "invalid/workloads/paddlejob-20gib.yaml": (
        1,
        [
            ("PaddleJob/default/paddle-resnet-20gib", "GS005-mem-exceeds-gpu", "deny"),
            ("PaddleJob/default/paddle-resnet-20gib", "GS005-mem-exceeds-gpu", "deny"),
        ],
    ),
    "invalid/workloads/pytorchjob-33.yaml": (
        1,
        [
            ("PyTorchJob/default/pytorch-mnist-33", "GS001-core-percentage-step", "deny"),
        ],
    ),
    "invalid/workloads/raycluster-no-selector.yaml": (
        1,
        [
            ("RayCluster/default/ray-no-selector", "GS007-pool-target-missing", "deny"),
        ],
    ),
    "invalid/workloads/rayjob-core-without-mem.yaml": (
        1,
        [
            ("RayJob/default/ray-train-no-mem", "GS003-core-without-mem", "deny"),
        ],
    ),
    "invalid/workloads/rayservice-2Gi.yaml": (
        1,
        [
            ("RayService/default/ray-serve-2gi", "GS004-mem-positive-integer", "deny"),
        ],
    ),
    "invalid/workloads/tfjob-typo.yaml": (
        1,
        [
            ("TFJob/default/tf-mnist-typo", "GS012-unknown-gpu-resource", "deny"),
            ("TFJob/default/tf-mnist-typo", "GS009-pool-kind-mismatch", "deny"),
            ("TFJob/default/tf-mnist-typo", "GS012-unknown-gpu-resource", "deny"),
            ("TFJob/default/tf-mnist-typo", "GS009-pool-kind-mismatch", "deny"),
        ],
    ),
    "invalid/workloads/volcano-job-request-mismatch.yaml": (
        1,
        [
            ("Job/default/volcano-train-mismatch", "GS006-request-limit-mismatch", "deny"),
        ],
    ),
    "invalid/workloads/workflow-120.yaml": (
        1,
        [
            ("Workflow/default/train-gpushare-120", "GS002-core-percentage-range", "deny"),
        ],
    ),
    "invalid/workloads/workflowtemplate-33.yaml": (
        1,
        [
            ("WorkflowTemplate/default/train-template-33", "GS001-core-percentage-step", "deny"),
        ],
    ),
    "invalid/workloads/xgboostjob-on-gpu-core.yaml": (
        1,
        [
            ("XGBoostJob/default/xgboost-iris-core", "GS009-pool-kind-mismatch", "deny"),
            ("XGBoostJob/default/xgboost-iris-core", "GS009-pool-kind-mismatch", "deny"),
        ],
    ),
}


def test_every_example_has_an_expectation() -> None:
    # examples/context and examples/cluster hold Nodes/Pods used as context, not manifests to check.
    files = {
        str(p.relative_to(EX)) for p in EX.rglob("*.yaml") if p.parent.name not in ("context", "cluster")
    }
    assert files == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, findings = run_check(capsys, "-f", str(EX / name), *_context_args())
    want_code, want = EXPECTED[name]
    assert [(f["object"], f["rule_id"], f["verdict"]) for f in findings] == want
    assert code == want_code
    for f in findings:
        assert f["rule_id"] in f["message"] and f["object"] in f["message"]


def test_overlap_message_names_nodes_and_pools(capsys: pytest.CaptureFixture[str]) -> None:
    _, findings = run_check(capsys, "-f", str(EX / "invalid/pool-overlap.yaml"), *_context_args())
    messages = " ".join(f["message"] for f in findings)
    assert "np-cgpu-node-1, np-cgpu-node-2 that belong to GPUSharePool cgpu" in messages
    assert "np-gpu-core-node-1, np-gpu-core-node-2 that belong to GPUSharePool gpu-core" in messages


@pytest.mark.parametrize(
    ("name", "rules"),
    [
        # Without nodes, the per-GPU memory and overlaps are unknown: those rules do not fire.
        pytest.param("invalid/cuda-sample-20gib.yaml", [], id="20gib"),
        pytest.param("invalid/job-gpu-count-8.yaml", [], id="gpu-count-8"),
        pytest.param("invalid/pod-node-name.yaml", ["GS017-node-name-set"], id="node-name"),
        pytest.param("invalid/pool-overlap.yaml", [], id="overlap"),
        pytest.param("invalid/cuda-sample-33.yaml", ["GS001-core-percentage-step"], id="33"),
    ],
)
def test_without_nodes(name: str, rules: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    _, findings = run_check(capsys, "-f", str(EX / name), *_context_args(with_nodes=False))
    assert [f["rule_id"] for f in findings] == rules


def test_without_pools_the_rules_that_need_no_pool_still_apply(capsys: pytest.CaptureFixture[str]) -> None:
    # The seed selector alone resolves by the ACK labels: cgpu.disable.isolation=false is the cgpu kind.
    assert run_check(capsys, "--offline", "-f", str(EX / "invalid/cgpu-test-ambiguous.yaml")) == (0, [])
    code, findings = run_check(capsys, "--offline", "-f", str(EX / "invalid/cuda-sample-0.yaml"))
    assert (code, [f["rule_id"] for f in findings]) == (1, ["GS002-core-percentage-range"])
    code, findings = run_check(capsys, "--offline", "-f", str(EX / "invalid/cgpu-test-no-node-selector.yaml"))
    assert (code, [f["rule_id"] for f in findings]) == (1, ["GS007-pool-target-missing"])
    code, findings = run_check(capsys, "--offline", "-f", str(EX / "job-cgpu-test-no-isolation.yaml"))
    assert (code, [f["rule_id"] for f in findings]) == (0, ["GS010-no-isolation-sizing"])


def test_pools_in_f_files_are_context(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--offline", "-f", str(EX / "invalid/cgpu-test-ambiguous.yaml")]
    for p in POOLS:
        args += ["-f", str(p)]
    code, findings = run_check(capsys, *args)
    assert (code, [f["rule_id"] for f in findings]) == (1, ["GS008-pool-target-ambiguous"])


def test_list_output_of_kubectl_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    items = [yaml.safe_load(p.read_text()) for p in POOLS]
    pools = tmp_path / "pools.yaml"
    pools.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    code, findings = run_check(
        capsys, "-f", str(EX / "invalid/memory-only-on-gpu-core.yaml"), "--pools", str(pools)
    )
    assert code == 1 and {f["rule_id"] for f in findings} == {"GS009-pool-kind-mismatch"}


def test_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "check",
            "--offline",
            "-f",
            str(EX / "invalid/cuda-sample-33.yaml"),
            "-f",
            str(EX / "job-cgpu-test-no-isolation.yaml"),
        ]
    )
    lines = capsys.readouterr().out.splitlines()
    assert code == 1
    assert lines[0].startswith("DENY GS001-core-percentage-step Job/default/cuda-sample-33: ")
    assert lines[1].startswith("WARN GS010-no-isolation-sizing Job/default/cgpu-test-no-isolation: ")
    assert lines[2] == "checked 2 object(s): 1 denied, 1 warning(s)"


@pytest.mark.parametrize(
    ("args", "text", "message"),
    [
        pytest.param(["-f", "/nonexistent.yaml"], None, "/nonexistent.yaml: no such file", id="missing-file"),
        pytest.param(["-f", "BAD"], "a: [\n", "is not valid YAML", id="bad-yaml"),
        pytest.param(["-f", "BAD"], "- 1\n- 2\n", "document 1 is a list", id="not-an-object"),
        pytest.param(["-f", "BAD"], "metadata: {}\n", "has no 'kind'", id="no-kind"),
        pytest.param(
            ["-f", "examples/job-cuda-sample.yaml", "--pools", "BAD"],
            "kind: ConfigMap\nmetadata: {name: x}\n",
            "ConfigMap/default/x is neither a GPUSharePool nor a Node",
            id="pools-wrong-kind",
        ),
        pytest.param(
            ["-f", "examples/job-cuda-sample.yaml", "--pools", "examples/invalid/pool-empty-selector.yaml"],
            None,
            "--pools: GPUSharePool/everything",
            id="invalid-context-pool",
        ),
    ],
)
def test_unreadable_input_exits_2_with_one_line(
    args: list[str], text: str | None, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    if text is not None:
        bad.write_text(text)
    args = [str(bad) if a == "BAD" else (str(REPO / a) if a.startswith("examples/") else a) for a in args]
    code = main(["check", *args])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_console_script_subprocess() -> None:
    exe = shutil.which("gpushare", path=str(Path(sys.executable).parent))
    assert exe is not None, "the gpushare console script is not installed in the venv"
    args = [
        exe,
        "check",
        "-f",
        str(EX),
        "-f",
        str(EX / "invalid/cuda-sample-33.yaml"),
        *_context_args(),
        "-o",
        "json",
    ]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1, proc.stderr
    findings = json.loads(proc.stdout)
    assert [(f["rule_id"], f["verdict"]) for f in findings] == [
        ("GS010-no-isolation-sizing", "warn"),
        ("GS001-core-percentage-step", "deny"),
    ]
    ok = subprocess.run(
        [exe, "check", "-f", str(EX), *_context_args()], capture_output=True, text=True, check=False
    )
    assert ok.returncode == 0 and "0 denied, 1 warning(s)" in ok.stdout
    bad = subprocess.run([exe, "check", "-f", "/nonexistent"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and bad.stderr.strip() == "gpushare check: error: /nonexistent: no such file"


def test_without_context_files_check_reads_the_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No --pools/--nodes/--offline: the live cluster is the context; no kubeconfig is one line, exit 2."""
    missing = tmp_path / "nope" / "kubeconfig"
    code = main(["check", "-f", str(EX / "job-cuda-sample.yaml"), "--kubeconfig", str(missing)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err == (
        f"gpushare check: error: kubeconfig '{missing}' does not exist "
        "(pass --kubeconfig or set KUBECONFIG); "
        "to check without a cluster use --offline or --pools/--nodes files"
    )


# --- robust input ---------------------------------------------------------------------------------

ALIAS_BOMB = (
    "apiVersion: v1\nkind: Pod\nmetadata: {name: bomb}\nspec:\n  containers:\n  - name: c\n"
    "    resources:\n      limits:\n        aliyun.com/gpu-mem: &l9 [" + ", ".join(["*l8"] * 9) + "]\n"
)
ALIAS_ANCHORS = "x0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"x{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n" for i in range(1, 9)
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "a:\n" + "".join(" " * (i + 1) + "a:\n" for i in range(300)),
            "nested more than 100",
            id="deep-block",
        ),
        pytest.param("kind: Pod\nx: " + "[" * 100_000, "nested more than 100", id="deep-flow"),
        pytest.param(
            "x: " + "{a: " * 150 + "1" + "}" * 150 + "\nkind: Pod\n",
            "nested more than 100",
            id="deep-flow-maps",
        ),
        pytest.param(ALIAS_ANCHORS + ALIAS_BOMB.replace("&l9 ", ""), "alias bomb", id="alias-bomb"),
        pytest.param("apiVersion: v1\nkind: Pod\nkind: Job\n", "duplicate key 'kind'", id="duplicate-key"),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {{ .Values.name }}\n",
            "is a Helm template",
            id="helm-template",
        ),
        pytest.param(
            "kind: ConfigMap\ndata:\n  " + "k" * 1000 + ": 1\n  " + "k" * 1000 + ": 2\n",
            "(1002 characters)",
            id="long-key-clipped",
        ),
    ],
)
def test_pathological_input_fails_fast_with_one_line(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    code = main(["check", "--offline", "-f", str(bad)])
    captured = capsys.readouterr()
    assert code == 2
    assert message in captured.err, captured.err
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err
    assert len(captured.err) < 600


def test_merge_keys_are_not_duplicates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "merge.yaml"
    f.write_text(
        "base: &b {image: x}\napiVersion: v1\nkind: Pod\nmetadata: {name: m}\n"
        "spec:\n  containers:\n  - <<: *b\n    name: c\n    resources: {limits: {aliyun.com/gpu-mem: 2}}\n"
    )
    assert main(["check", "--offline", "-f", str(f), "-o", "json"]) == 1
    (finding,) = json.loads(capsys.readouterr().out)
    assert finding["rule_id"] == "GS007-pool-target-missing" and finding["object"] == "Pod/default/m"


def test_a_mixed_directory_is_checked_whole_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "mixed"
    (d / "templates").mkdir(parents=True)
    (d / "a-template.yaml").write_text('kind: Pod\nmetadata:\n  name: {{ include "x" . }}\n')
    (d / "b-bad.yaml").write_text("kind: [unclosed\n")
    (d / "c-good.yaml").write_text((EX / "job-cuda-sample.yaml").read_text())
    (d / "d-denied.yaml").write_text((EX / "invalid/cuda-sample-33.yaml").read_text())
    (d / "e-pytorch.yaml").write_text((EX / "invalid/workloads/pytorchjob-33.yaml").read_text())
    (d / "notes.txt").write_text("not a manifest")
    code = main(["check", "-f", str(d), *_context_args()])
    captured = capsys.readouterr()
    assert code == 2
    errors = captured.err.strip().splitlines()
    assert len(errors) == 2
    assert "a-template.yaml: is a Helm template" in errors[0] and "helm template" in errors[0]
    assert "b-bad.yaml:" in errors[1] and "is not valid YAML" in errors[1]
    out = captured.out.strip().splitlines()
    assert out[-1] == "checked 3 object(s): 2 denied, 0 warning(s), 2 file(s) unreadable"
    assert any("Job/default/cuda-sample-33" in line for line in out)
    assert any("PyTorchJob/default/pytorch-mnist-33" in line for line in out)


def test_long_values_are_cut_in_messages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "long.yaml"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "long"},
        "spec": {
            "nodeSelector": {"gpushare.io/pool": "cgpu"},
            "containers": [
                {"name": "c", "resources": {"limits": {"aliyun.com/gpu-mem": "9" * 100_000 + "x"}}}
            ],
        },
    }
    f.write_text(json.dumps(pod))
    assert main(["check", "-f", str(f), *_context_args(), "-o", "json"]) == 1
    (finding,) = json.loads(capsys.readouterr().out)
    assert finding["rule_id"] == "GS004-mem-positive-integer"
    assert len(finding["message"]) < 600 and "(100003 characters)" in finding["message"]


@given(
    doc=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda children: (
            st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
        ),
        max_leaves=20,
    ),
    kind=st.sampled_from(["Pod", "Job", "PyTorchJob", "RayCluster", "Workflow", "GPUSharePool", "Thing", 3]),
)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_object_gives_an_exit_code_never_a_traceback(
    doc: Any, kind: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "random.json"
    api = {"PyTorchJob": "kubeflow.org/v1", "RayCluster": "ray.io/v1", "Workflow": "argoproj.io/v1alpha1"}
    obj = {"apiVersion": api.get(str(kind), "v1"), "kind": kind, "metadata": doc, "spec": doc}
    f.write_text(json.dumps(obj))
    code = main(["check", "--offline", "-f", str(f)])
    captured = capsys.readouterr()
    assert code in (0, 1, 2)
    assert "Traceback" not in captured.err
    if code == 2:
        assert len(captured.err.strip().splitlines()) == 1


def test_check_judges_nvidia_requests_against_nvidia_pools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`check` with an NVIDIA pool among the context: the pool's kind is nvidia (never cgpu), a
    container asking for more than one shared GPU where the plugin refuses it is denied (GS019),
    and ACK sharing aimed at the NVIDIA pool is a kind mismatch (GS009)."""
    pool = {
        "apiVersion": "gpushare.io/v1alpha1",
        "kind": "GPUSharePool",
        "metadata": {"name": "mps"},
        "spec": {
            "nodeSelector": {"matchLabels": {"alibabacloud.com/nodepool-id": "np-mps"}},
            "nvidia": {"strategy": "MPS", "replicas": 2},
        },
    }

    def pod(name: str, limits: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeSelector": {"gpushare.io/pool": "mps"},
                "containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}],
            },
        }

    f = tmp_path / "all.yaml"
    docs = [pool, pod("two", {"nvidia.com/gpu": 2}), pod("one", {"nvidia.com/gpu": 1}), pod("ack", {MEM: 2})]
    f.write_text("\n---\n".join(json.dumps(d) for d in docs))
    code, findings = run_check(capsys, "--offline", "-f", str(f))
    assert code == 1
    assert [(x["object"], x["rule_id"]) for x in findings] == [
        ("Pod/default/two", "GS019-nvidia-more-than-one-shared-gpu"),
        ("Pod/default/ack", "GS009-pool-kind-mismatch"),
    ]
    two = findings[0]
    assert two["field"] == 'spec.containers[0].resources.limits["nvidia.com/gpu"]' and two["value"] == "2"
    assert (
        "pool mps shares its GPUs with MPS" in two["message"]
        and 'ask for 1 "nvidia.com/gpu"' in two["message"]
    )
