"""`miniyaie harness`: the flags of chapter 4's kernel harness; the tool lives in miniyaie.bench.kernel_harness."""

from __future__ import annotations

import argparse

from miniyaie.cli.args import UsageError


def add_parsers(sub) -> None:
    from miniyaie.bench.kernel_cases import KERNELS

    p = sub.add_parser("harness", help="check (and on a GPU, time) the chapter 4 kernels")
    p.add_argument("--impl", default=None, help="which tree's kernels: solutions (default), chapters, or a mix")
    p.add_argument("--kernel", choices=KERNELS, action="append", help="only this kernel (repeatable)")
    p.add_argument("--json", default=None, metavar="OUT", help="write the results as JSON")
    p.add_argument("--plot", default=None, metavar="OUT.png", help="draw the roofline of the results")
    p.set_defaults(handler=cmd_harness)


def cmd_harness(args: argparse.Namespace) -> int:
    from miniyaie import _switch
    from miniyaie.bench import kernel_harness

    try:
        return kernel_harness.main(args)
    except _switch.ImplError as exc:
        raise UsageError(str(exc)) from None
