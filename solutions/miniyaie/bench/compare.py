"""`miniyaie bench compare "COMMAND A" "COMMAND B"`: time two shell commands fairly, side by side.

    miniyaie bench compare "miniyaie generate --max-tokens 64 'Hi'" \\
        "miniyaie generate --max-tokens 64 --attention-backend torch 'Hi'" --runs 10 --warmup 1

Each command runs through the shell, its output discarded; the runs are
made and read by chapter 5's `compare` (engine/comparison.py, Task 5.17):
warm-ups left out, pairs side by side taking turns going first, medians,
and the paired ratios' quartiles that say whether the difference is noise.
A command that fails stops the comparison (exit status 1).
"""

from __future__ import annotations

import json
import subprocess


class CommandFailed(RuntimeError):
    pass


def shell_runner(command: str):
    def run() -> None:
        done = subprocess.run(command, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise CommandFailed(f"{command!r} exited with {done.returncode}: {done.stderr.strip()[-500:]}")
    return run


def main(args) -> int:
    from miniyaie.engine.comparison import compare

    names = args.names.split(",") if args.names else ["A", "B"]
    if len(names) != 2:
        print(f"--names takes two comma-separated names, got {args.names!r}")
        return 2
    try:
        result = compare(shell_runner(args.command_a), shell_runner(args.command_b), runs=args.runs, warmup=args.warmup)
    except CommandFailed as exc:
        print(f"bench compare: {exc}")
        return 1
    print(f"{names[0]}: {args.command_a}\n{names[1]}: {args.command_b}")
    print(result.summary(*names))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(names=names, commands=[args.command_a, args.command_b], a_seconds=result.a_seconds,
                           b_seconds=result.b_seconds, order=result.order, ratio=result.ratio, low=result.low,
                           high=result.high, within_noise=result.within_noise), f, indent=2)
    return 0
