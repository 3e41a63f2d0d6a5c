"""The CLI on hostile input: bounded reads, every bad input named on its own line, exit 2, and a
closed pipe ends quietly. Each command runs as a user runs it (a subprocess); its time and peak
memory are printed (``-s``), and memory is held under 200 MB."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from gpushare.objectfiles import MAX_FILE_BYTES

EX = Path(__file__).resolve().parents[2] / "examples"
NODES = str(EX / "cluster")
MAX_RSS_MB = 200
BAD_POOLS = """\
apiVersion: gpushare.io/v1alpha1
kind: GPUSharePool
metadata: {name: p}
spec: {nodeSelector: 5, memoryIsolation: "maybe"}
---
apiVersion: gpushare.io/v1alpha1
kind: GPUSharePool
metadata: {name: q}
spec: {placement: 7}
"""


#: Runs the CLI as ``python -m gpushare`` does, then writes the process's own peak RSS (VmHWM of
#: its address space) to $GPUSHARE_TEST_RSS. (The kernel's ``ru_maxrss`` of a child starts at its
#: parent's size, and the test process holds the suite's state.)
RUN_AND_MEASURE = """
import os, sys
from gpushare.cli import main
try:
    code = main(sys.argv[1:])
finally:
    with open("/proc/self/status") as status, open(os.environ["GPUSHARE_TEST_RSS"], "w") as out:
        out.write(next(line for line in status if line.startswith("VmHWM:")).split()[1])
sys.exit(code)
"""


def gpushare(*args: str, cwd: Path | None = None) -> tuple[int, str, str, float, float]:
    """``(exit code, stdout, stderr, seconds, peak RSS in MB)`` of ``gpushare ARGS``."""
    with tempfile.TemporaryDirectory() as tmp:
        rss_file = Path(tmp) / "rss"
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", RUN_AND_MEASURE, *args], capture_output=True, text=True, timeout=120,
            cwd=cwd, env={**os.environ, "GPUSHARE_TEST_RSS": str(rss_file)},
        )  # fmt: skip
        elapsed = time.monotonic() - started
        rss_mb = int(rss_file.read_text()) / 1024  # kB
    print(f"gpushare {' '.join(args)[:80]}: exit {done.returncode} in {elapsed:.2f} s, {rss_mb:.0f} MB")
    return done.returncode, done.stdout, done.stderr, elapsed, rss_mb


def error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr[-2000:]
    return [line for line in stderr.splitlines() if line.strip()]


@pytest.fixture
def bad_dir(tmp_path: Path) -> Path:
    for i in range(1000):
        (tmp_path / f"bad{i:04}.yaml").write_text("kind: [\n")
    (tmp_path / "pools.yaml").write_text(BAD_POOLS)
    return tmp_path


@pytest.mark.parametrize("command", ["check", "plan", "inspect"])
def test_dev_zero_is_read_up_to_the_cap(command: str) -> None:
    args = {
        "check": ["--offline", "-f"],
        "plan": ["--nodes", NODES, "-f"],
        "inspect": ["--nodes", NODES, "--pools"],
    }
    code, _, err, _, rss = gpushare(command, *args[command], "/dev/zero")
    assert code == 2
    assert error_lines(err) == [
        f"gpushare {command}: error: /dev/zero: larger than {MAX_FILE_BYTES >> 20} MiB"
    ]
    assert rss < MAX_RSS_MB


def test_a_fifo_without_a_writer_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, _, err, _, _ = gpushare("check", "--offline", "-f", str(fifo))  # a hang: subprocess's timeout
    assert code == 2
    assert error_lines(err) == [f"gpushare check: error: {fifo}: a FIFO that no writer opened within 3 s"]


def test_a_fifo_with_a_writer_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"sleep 1; cat {EX / 'job-cuda-sample.yaml'} > {fifo}"])
    try:
        code, out, err, _, _ = gpushare(
            "check", "--offline", "-f", str(fifo), "--pools", str(EX / "pool-cgpu.yaml")
        )
    finally:
        writer.wait(timeout=30)
    assert code in (0, 1) and not error_lines(err), err
    assert "checked 1 object(s)" in out


def test_a_thousand_bad_files_are_each_named_once(bad_dir: Path) -> None:
    for command, args in (("check", ["--offline", "-f", "."]), ("plan", ["--nodes", NODES, "-f", "."])):
        code, _, err, _, rss = gpushare(command, *args, cwd=bad_dir)
        lines = error_lines(err)
        assert code == 2
        bad = [line for line in lines if "is not valid YAML" in line]
        assert len(bad) == 1000, lines[:3]
        assert len({line.split(":")[2] for line in bad}) == 1000  # one line per file
        assert rss < MAX_RSS_MB


def test_every_bad_pool_is_named_and_exits_2(bad_dir: Path) -> None:
    pools = str(bad_dir / "pools.yaml")
    job = str(EX / "job-cuda-sample.yaml")
    for command, args in (
        ("check", ["-f", job, "--pools", pools]),
        ("plan", ["--nodes", NODES, "-f", pools]),
        ("plan", ["--nodes", NODES, "--pools", pools]),
        ("inspect", ["--nodes", NODES, "--pools", pools]),
    ):
        code, _, err, _, _ = gpushare(command, *args)
        lines = error_lines(err)
        assert code == 2, (command, args, err)
        assert len(lines) == 2, lines
        assert "GPUSharePool/p: spec.nodeSelector" in lines[0] and "GPUSharePool/q" in lines[1]


def test_a_file_just_under_the_cap(tmp_path: Path) -> None:
    doc = "---\n" + (EX / "job-cuda-sample.yaml").read_text()
    big = tmp_path / "big.yaml"
    big.write_text(doc * ((MAX_FILE_BYTES - 1024) // len(doc)))
    assert MAX_FILE_BYTES - 64 * 1024 < big.stat().st_size <= MAX_FILE_BYTES
    code, out, err, _, rss = gpushare("check", "--offline", "-f", str(big))
    assert code == 0 and not error_lines(err)
    assert f"checked {(MAX_FILE_BYTES - 1024) // len(doc)} object(s)" in out
    assert rss < MAX_RSS_MB
    (tmp_path / "over.yaml").write_text(doc * (MAX_FILE_BYTES // len(doc) + 1))
    code, _, err, _, _ = gpushare("check", "--offline", "-f", str(tmp_path / "over.yaml"))
    assert code == 2 and "larger than" in err


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Inputs whose output is far larger than a pipe's buffer (so the writer meets the closed pipe)."""
    out = tmp_path_factory.mktemp("many")
    nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"n{i}", "labels": {"alibabacloud.com/nodepool-id": "np-cgpu"}},
        }
        for i in range(3000)
    ]
    (out / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))
    doc = "---\n" + (EX / "invalid" / "cuda-sample-33.yaml").read_text()
    (out / "jobs.yaml").write_text(doc * 2000)
    return out


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "--pools", str(EX / "pool-cgpu.yaml"), "--nodes", "{many}/nodes.json", "-a"],
        ["check", "--offline", "-f", "{many}/jobs.yaml", "-o", "json"],
        ["inspect", "--pools", str(EX / "pool-cgpu.yaml"), "--nodes", "{many}/nodes.json"],
    ],
)
def test_a_closed_pipe_ends_quietly(many: Path, args: list[str]) -> None:
    """``gpushare ... | head -1``: exit 0, no traceback (as ``kubectl ... | head``)."""
    line = " ".join(a.format(many=many) for a in args)
    shell = f"{sys.executable} -m gpushare {line} | head -1; exit ${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert len(done.stdout.splitlines()) == 1
    full = subprocess.run(
        ["bash", "-c", f"{sys.executable} -m gpushare {line} | wc -c"], capture_output=True, text=True
    )
    assert int(full.stdout) > 256 * 1024, "the output must be larger than a pipe's buffer"
