"""The long build steps say what they are doing, with an estimate (issue 24, point 8).

hack/build-control-plane.sh compiled for a quarter of an hour behind one line. It now logs the
number of packages to compile and an estimate first, then a line every 30 s with the packages
done, the time so far and the time left at that pace (hack/go-progress.sh). These tests run the
progress filter on made-up `go build -v` output, and the whole script against a fake `go` in a
temporary cache: the real cache and the real toolchain are never touched.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROGRESS = REPO / "hack" / "go-progress.sh"
SCRIPT = REPO / "hack" / "build-control-plane.sh"


def _filter(stdin: str, total: int, *, every: int = 0, fail: int = 0) -> subprocess.CompletedProcess[str]:
    """``producer | go_progress kube TOTAL`` under pipefail; the producer exits ``fail``."""
    script = (
        "set -euo pipefail\n"
        "log() { printf '[test] %s\\n' \"$*\" >&2; }\n"
        f". {PROGRESS}\n"
        f"(cat; exit {fail}) | go_progress kube {total}\n"
    )
    return subprocess.run(
        ["bash", "-c", script],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "GO_PROGRESS_EVERY": str(every)},
    )


def test_progress_counts_packages_against_the_total() -> None:
    r = _filter("runtime\nnet/http\nk8s.io/apiserver/pkg/server\n", total=4)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    # The seconds are the machine's (a loaded one takes a second or more): only their form is checked.
    assert re.match(r"\[test\] kube: 1/4 packages compiled, \d+s so far", lines[0]), lines
    assert lines[2].endswith("(now k8s.io/apiserver/pkg/server)"), lines
    assert re.fullmatch(r"\[test\] kube: 3 package\(s\) compiled in \d+s", lines[-1]), lines


def test_progress_is_quiet_between_ticks() -> None:
    r = _filter("".join(f"pkg/{i}\n" for i in range(50)), total=50, every=3600)
    (line,) = r.stderr.splitlines()
    assert re.fullmatch(r"\[test\] kube: 50 package\(s\) compiled in \d+s", line), line


def test_compiler_errors_pass_through_and_the_build_still_fails() -> None:
    out = "k8s.io/a\n# k8s.io/b\nb/x.go:3:1: syntax error: unexpected }\n"
    r = _filter(out, total=10, every=3600, fail=1)
    assert r.returncode == 1
    assert "# k8s.io/b\nb/x.go:3:1: syntax error: unexpected }\n" in r.stderr


FAKE_GO = """#!/usr/bin/env bash
# A stand-in for `go` that knows the few commands hack/build-control-plane.sh runs.
case "$1 $2" in
  "mod init"|"mod edit"|"get -tool") exit 0 ;;
  "mod download") printf '{"GoMod": "%s"}\\n' "$FAKE_GOMOD" ;;
  "list -deps") printf 'runtime\\nfake/a\\nfake/b\\n' ;;
  "build -v")
    out=""; prev=""; for a in "$@"; do [ "$prev" = "-o" ] && out=$a; prev=$a; done
    for p in runtime fake/a fake/b; do echo "$p" >&2; done
    mk() { printf '#!/bin/sh\\necho "%s fake"\\n' "$(basename "$1")" > "$1"; chmod +x "$1"; }
    case $out in
      */) for b in kube-apiserver kube-controller-manager kube-scheduler; do mk "$out$b"; done ;;
      *) mk "$out" ;;
    esac ;;
  *) echo "fake go: unexpected: $*" >&2; exit 2 ;;
esac
"""


def test_the_script_announces_each_build_with_its_size_and_an_estimate(tmp_path: Path) -> None:
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "go").write_text(FAKE_GO)
    (fake / "go").chmod((fake / "go").stat().st_mode | stat.S_IEXEC)
    gomod = tmp_path / "kubernetes.mod"
    gomod.write_text("module k8s.io/kubernetes\n\ngo 1.24.0\n\nrequire k8s.io/api v0.0.0\n")
    env = {
        **os.environ,
        "PATH": f"{fake}:{os.environ['PATH']}",
        "GPUSHARE_CACHE": str(tmp_path / "cache"),
        "GPUSHARE_BIN": str(tmp_path / "cache" / "bin" / "fake"),
        "FAKE_GOMOD": str(gomod),
        "GO_PROGRESS_EVERY": "0",
    }
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60, env=env)
    free_kb = shutil.disk_usage(Path.home()).free // 1024
    if free_kb < 8 * 1024 * 1024:
        assert r.returncode == 1 and "need about 8 GiB free" in r.stderr, r.stderr
        return
    assert r.returncode == 0, r.stderr
    log = r.stderr
    assert (
        "[build-control-plane] compiling kube-apiserver, kube-controller-manager, kube-scheduler v1.34.4:"
        " 3 packages (cold, on 2 cores: about 10-20 minutes; a line every 30 s)"
    ) in log
    assert (
        "[build-control-plane] compiling etcd v3.6.16: 3 packages (cold, on 2 cores: about 1-3 minutes" in log
    )
    assert "[build-control-plane] kwok v0.7.0: 2/3 packages compiled" in log
    assert "[build-control-plane] etcd v3.6.16: 3 package(s) compiled in" in log
    assert log.rstrip().endswith(f"binaries ready in {env['GPUSHARE_BIN']}")


# --- make test ---------------------------------------------------------------------------------


def test_make_test_says_what_it_runs_and_how_long_the_rest_takes() -> None:
    from support.progress import plan_line, progress_line

    assert plan_line(900, 300, 60) == (
        "[make test] 900 tests: 300 integration tests against a local control plane (etcd, kube-apiserver,"
        " kube-controller-manager, kube-scheduler, kwok; started once, about 20 s), then 600 unit and"
        " property tests (about a minute); progress every 60 s"
    )
    line = progress_line(100, 400, 250)
    assert line == "[make test] 100/400 tests in 4m10s, about 12m30s left at this pace"
    assert progress_line(400, 400, 3725) == "[make test] 400/400 tests in 1h02m"


def test_the_makefile_turns_the_progress_on_and_announces_the_slow_steps() -> None:
    makefile = (REPO / "Makefile").read_text()
    test_recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "GPUSHARE_TEST_PROGRESS=1" in test_recipe
    setup_recipe = makefile.split("$(BIN)/gpushare: pyproject.toml", 1)[1].split("\n\n", 1)[0]
    assert "pip install -q -e" not in setup_recipe, "the long install must not be silent"
    assert "[setup]" in setup_recipe


def test_the_kubelet_build_reports_its_progress_too(tmp_path: Path) -> None:
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "go").write_text(FAKE_GO)
    (fake / "go").chmod((fake / "go").stat().st_mode | stat.S_IEXEC)
    gomod = tmp_path / "kubernetes.mod"
    gomod.write_text("module k8s.io/kubernetes\n\ngo 1.24.0\n")
    env = {
        **os.environ,
        "PATH": f"{fake}:{os.environ['PATH']}",
        "GPUSHARE_CACHE": str(tmp_path / "cache"),
        "GPUSHARE_KUBELET_BIN": str(tmp_path / "cache" / "bin" / "kubelet"),
        "FAKE_GOMOD": str(gomod),
        "GO_PROGRESS_EVERY": "0",
    }
    script = REPO / "hack" / "build-kubelet.sh"
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert "[build-kubelet] compiling kubelet v1.34.4: 3 packages (about 5 minutes on 2 cores" in r.stderr
    assert "[build-kubelet] kubelet v1.34.4: 2/3 packages compiled" in r.stderr
    assert r.stderr.rstrip().endswith(f"kubelet ready in {env['GPUSHARE_KUBELET_BIN']}")


def test_the_summary_counts_the_real_node_tier_and_never_a_skip_as_a_pass() -> None:
    from support.progress import realnode_line, realnode_outcome

    assert realnode_line({"passed": 7}) == "real-node tier: 7 passed"
    assert realnode_line({"passed": 5, "failed": 1, "skipped": 1, "error": 1}) == (
        "real-node tier: 5 passed, 1 failed, 1 error, 1 skipped"
    )
    assert realnode_line({"failed": 2}) == "real-node tier: 0 passed, 2 failed"
    assert realnode_line({}) == "real-node tier: NOT RUN: no real-node test was selected (paths, -m or -k)"
    # one test, by its phases: a teardown error after a passed call is an error, not a pass
    state = None
    for when, outcome in (("setup", "passed"), ("call", "passed"), ("teardown", "failed")):
        state = realnode_outcome(when, outcome, state)
    assert state == "error"
    state = None
    for when, outcome in (("setup", "passed"), ("call", "failed"), ("teardown", "failed")):
        state = realnode_outcome(when, outcome, state)
    assert state == "failed"
    assert realnode_outcome("setup", "skipped", None) == "skipped"
    assert realnode_outcome("setup", "passed", None) is None


def test_the_summary_names_an_exported_real_nodes_0_as_the_reason() -> None:
    from support.progress import realnode_line, realnode_off_reason

    exported = realnode_off_reason({"GPUSHARE_REAL_NODES": "0", "GPUSHARE_REAL_NODES_ORIGIN": "environment"})
    assert realnode_line({}, deselected=9, off_reason=exported) == (
        "real-node tier: NOT RUN: REAL_NODES=0 is exported in the environment (`unset REAL_NODES` to run it);"
        " 9 real-node test(s) deselected"
    )
    assert realnode_off_reason({"GPUSHARE_REAL_NODES_ORIGIN": "command line"}) == (
        "REAL_NODES=0 on make's command line"
    )
    assert realnode_off_reason({"GPUSHARE_REAL_NODES": "0"}).startswith(
        "GPUSHARE_REAL_NODES=0 is exported in the environment"
    )
    # make passes where REAL_NODES came from, to both targets that run the tier
    makefile = (REPO / "Makefile").read_text()
    for target in ("\ntest:", "\ntest-integration:"):
        recipe = makefile.split(target, 1)[1].split("\n\n", 1)[0]
        assert 'GPUSHARE_REAL_NODES_ORIGIN="$(origin REAL_NODES)"' in recipe, target
