"""`miniyaie hint N.M [--level L]`: the hints of a task, one level of strength at a time."""

from __future__ import annotations

import argparse
import re

from miniyaie.cli.args import UsageError


def add_parsers(sub) -> None:
    hint = sub.add_parser("hint", help="print a task's hints (level 1: the idea; 2: the algorithm; 3: pseudocode)")
    hint.add_argument("task", help="the task, e.g. 1.3")
    hint.add_argument("--level", type=int, default=1, help="show the hints up to this level (default 1)")
    hint.set_defaults(handler=cmd_hint)


def cmd_hint(args: argparse.Namespace) -> int:
    from miniyaie.course.hints import format_ladder, task_regions
    from miniyaie.course.registry import CHAPTERS, chapter
    from miniyaie.course.sync import regions_of

    if not re.fullmatch(r"\d+\.\d+", args.task):
        raise UsageError(f"a task is written N.M, e.g. 1.3; got {args.task!r}")
    if args.level < 1:
        raise UsageError(f"--level counts from 1, got {args.level}")
    number = int(args.task.split(".")[0])
    if number not in {ch.number for ch in CHAPTERS}:
        raise UsageError(f"no chapter {number}; chapters are {CHAPTERS[0].number}-{CHAPTERS[-1].number}")
    ch = chapter(number)
    by_task = task_regions(regions_of(ch))
    if args.task not in by_task:
        known = ", ".join(by_task) or "none yet"
        raise UsageError(f"chapter {number} has no task {args.task}; its tasks: {known}")
    print(format_ladder(args.task, by_task[args.task], args.level, ch.solution_dir.parent))
    return 0
