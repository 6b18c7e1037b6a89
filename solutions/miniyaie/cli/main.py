"""The `miniyaie` command's one parser: each command group adds its own subcommands and handler."""

from __future__ import annotations

import argparse
import sys

from miniyaie.cli import bench, challenge, course, generate, harness, hint, notebook, serve
from miniyaie.cli.args import Parser, UsageError
from miniyaie.backends.cpu.runtime import relaunch


def relaunch_with_cpu_runtime(argv: list[str]) -> None:
    """Start the command again on Intel's OpenMP and tcmalloc (miniyaie/backends/cpu/runtime.py says why)."""
    try:
        relaunch(argv)
    except ValueError as exc:  # a bad MINIYAIE_CPU_RUNTIME
        raise UsageError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="miniyaie", description="Mini-YAIE: an inference engine you build chapter by chapter.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for group in (generate, serve, bench, course, harness, hint, notebook, challenge):
        group.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if argv is None and getattr(args, "runs_engine", False) and not str(getattr(args, "device", None)).startswith("cuda"):
            relaunch_with_cpu_runtime(sys.argv[1:])  # returns when there is nothing to preload, or it was done
        return args.handler(args)
    except UsageError as exc:
        print(f"miniyaie: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
