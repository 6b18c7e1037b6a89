"""`miniyaie challenge N`: score your design on the chapter's fixed workload beside the reference and a baseline."""

from __future__ import annotations

import argparse

from miniyaie.cli.args import UsageError


def add_parsers(sub) -> None:
    p = sub.add_parser("challenge", help="score your design on a chapter's challenge (after its correctness tests pass)")
    p.add_argument("chapter", type=int, help="the chapter (0-11)")
    p.add_argument("--impl", default=None, help="which code is yours: default the chapter from chapters/ (see the book)")
    p.set_defaults(handler=cmd_challenge)


def cmd_challenge(args: argparse.Namespace) -> int:
    from miniyaie import _switch
    from miniyaie.challenges.base import challenge_for
    from miniyaie.challenges.runner import challenge

    try:
        challenge_for(args.chapter)
        if args.impl is not None:
            _switch.parse_impl(args.impl)
    except (ValueError, _switch.ImplError) as exc:
        raise UsageError(str(exc)) from None
    return challenge(args.chapter, args.impl)
