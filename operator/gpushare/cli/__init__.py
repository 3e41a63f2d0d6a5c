"""The ``gpushare`` command line: one sub-command per module in this package.

Each sub-command module exposes ``register(subparsers)``, which adds its parser and sets
``func`` to a callable taking the parsed ``argparse.Namespace`` and returning the exit code.
Errors a user can fix are raised as ``CLIError`` (or ``ManifestError`` for unreadable files) and
printed as one line, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gpushare import __version__, lazy_client
from gpushare.objectfiles import ManifestError

#: Sub-command modules, in the order `gpushare --help` lists them. Missing ones are skipped.
SUBCOMMANDS = ("check", "plan", "inspect", "advise", "run", "webhook", "agent", "quota")


class CLIError(Exception):
    """A problem with the user's input or environment; exit code 2 unless given."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def add_cluster_sources(p: argparse.ArgumentParser) -> None:
    """The live/offline choice of the read-only commands (``inspect``, ``advise``): the cluster
    through a kubeconfig, or Nodes, Pods and GPUSharePools from files."""
    p.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster, else KUBECONFIG, ~/.kube/config)"
    )
    p.add_argument("--nodes", action="append", default=[], metavar="FILE", help="offline: Nodes (repeatable)")
    p.add_argument("--pods", action="append", default=[], metavar="FILE", help="offline: Pods (repeatable)")
    p.add_argument(
        "--pools", action="append", default=[], metavar="FILE", help="offline: GPUSharePools (repeatable)"
    )


def build_parser(prog: str = "gpushare") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Declare, check and observe GPU sharing (ACK cGPU / gpushare) on Kubernetes nodes.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"gpushare.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"gpushare.cli.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "gpushare") -> int:
    # Before any sub-command imports Kopf or the Kubernetes client (see gpushare.lazy_client; each
    # long-running command logs at start whether it took effect).
    lazy_client.install()
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        sys.stdout.flush()
    except CLIError as exc:
        _print_error(f"{prog} {args.command}", exc)
        return exc.code
    except ManifestError as exc:  # any sub-command reading files: unreadable input is exit 2
        _print_error(f"{prog} {args.command}", exc)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `gpushare ... | head`: the reader is gone, as kubectl exits quietly
        _quiet_stdout()
        return 0
    return code


def _print_error(who: str, exc: Exception) -> None:
    """One line per problem (an error may name several bad files or pools)."""
    try:
        for line in str(exc).splitlines() or [""]:
            print(f"{who}: error: {line}", file=sys.stderr)
    except BrokenPipeError:
        pass


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def kubectl_plugin_main() -> None:
    """Entry point of ``kubectl-gpushare`` (so ``kubectl gpushare inspect`` works)."""
    sys.exit(main(prog="kubectl gpushare"))


def run() -> None:
    sys.exit(main())
