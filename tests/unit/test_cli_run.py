"""``gpushare run`` fails with one line, before starting Kopf, on unusable options."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpushare.cli import main


def test_missing_kubeconfig_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["run", "--kubeconfig", str(missing), "--metrics-port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"gpushare run: error: kubeconfig {str(missing)!r} does not exist "
        "(pass --kubeconfig or set KUBECONFIG)"
    )


def test_broken_kubeconfig_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    assert main(["run", "--kubeconfig", str(bad)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err and str(bad) in err


def test_help_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["run", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for option in (
        "--kubeconfig",
        "--namespace-for-events",
        "--metrics-port",
        "--liveness",
        "--log-format",
        "--event-loop",
        "--peering",
        "--webhook",
        "--webhook-local",
        "--webhook-via-kopf",
        "--webhook-cert-files",
        "--workload-kinds",
    ):
        assert option in out


@pytest.mark.parametrize("command", ["run", "webhook"])
def test_a_bad_metrics_port_is_one_line(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--metrics-port", "70000"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"gpushare {command}: error: --metrics-port 70000: not a port number"


def test_the_webhook_process_fails_like_run_on_a_missing_kubeconfig(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["webhook", "--kubeconfig", str(missing)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"gpushare webhook: error: kubeconfig {str(missing)!r} does not exist "
        "(pass --kubeconfig or set KUBECONFIG)"
    )


def test_the_webhook_process_takes_the_webhook_options_but_not_the_operators(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["webhook", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for option in (
        "--kubeconfig", "--metrics-port", "--liveness", "--webhook-port", "--webhook-local", "--event-loop",
    ):  # fmt: skip
        assert option in out
    for option in ("--peering", "--plugin-namespaces", "--namespace-for-events", "--webhook "):
        assert option not in out


def test_the_processes_serve_on_uvloop_unless_told_asyncio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import uvloop

    from gpushare.cli.run import loop_factory

    factory = loop_factory("uvloop")
    assert factory is not None
    loop = factory()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
    assert loop_factory("asyncio") is None  # asyncio.Runner's default loop
    for command in ("run", "webhook"):
        with pytest.raises(SystemExit) as exc:
            main([command, "--event-loop", "trio"])
        assert exc.value.code == 2
        assert "invalid choice: 'trio'" in capsys.readouterr().err
