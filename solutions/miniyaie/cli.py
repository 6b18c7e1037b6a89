"""The `miniyaie` command: generate, chat, grade, and the course tools."""

from __future__ import annotations

import argparse
import sys
import time


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        raise UsageError(message)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _probability(text: str) -> float:
    value = _non_negative_float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {value}")
    return value


def _add_sampling_args(p: argparse.ArgumentParser, max_tokens: int) -> None:
    # defaults are None: a flag overrides the --config file's sampling section, which overrides the defaults
    p.add_argument("--model", default=None, help="a local Hugging Face directory or hub id (default: bundled SmolLM2-135M-Instruct)")
    p.add_argument("--max-tokens", type=_positive_int, default=None, help=f"new tokens at most (default {max_tokens})")
    p.add_argument("--temperature", type=_non_negative_float, default=None, help="0 = greedy (default)")
    p.add_argument("--top-p", type=_probability, default=None, help="nucleus sampling mass (default 1)")
    p.add_argument("--top-k", type=int, default=None, help="sample from the k most likely tokens (default: all)")
    p.add_argument("--min-p", type=_non_negative_float, default=None, help="drop tokens below min-p x the best one's probability")
    p.add_argument("--repetition-penalty", type=_non_negative_float, default=None, help=">1 discourages repeats (default 1)")
    p.add_argument("--stop", action="append", default=None, help="a stop string (repeatable)")
    p.add_argument("--seed", type=int, default=None, help="seed for sampling")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--config", default=None, help="engine settings: a YAML or TOML file (engine:, sampling:, resource:)")
    p.add_argument("--impl", default=None, help="run your chapters, e.g. 'chapters' or 'engine=chapters' (see the book)")
    p.add_argument("--attention-backend", default=None, metavar="NAME",
                   help="torch, reference, triton (chapter 4's kernels) or auto = triton on CUDA (default: the config's, else auto)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="miniyaie", description="Mini-YAIE: an inference engine you build chapter by chapter.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    gen = sub.add_parser("generate", help="continue prompts (no chat template); several prompts run as one batch")
    gen.add_argument("prompt", nargs="+")
    _add_sampling_args(gen, max_tokens=64)

    chat = sub.add_parser("chat", help="chat with the model (chat template applied)")
    chat.add_argument("--message", default=None, help="send one message, print the reply, exit")
    _add_sampling_args(chat, max_tokens=256)

    from miniyaie import bench_serve, serve_cli

    serve_cli.add_parser(sub, _positive_int)
    bench = sub.add_parser("bench", help="benchmarks")
    bench_sub = bench.add_subparsers(dest="bench_command", required=True, parser_class=_Parser)
    bench_serve.add_parser(bench_sub, _positive_int)
    from miniyaie.bench.offline import add_parser as add_bench_offline_parser

    add_bench_offline_parser(bench_sub)

    grade = sub.add_parser("grade", help="run a chapter's tests on your code (chapters/)")
    grade.add_argument("chapter", type=int)
    grade.add_argument("--impl", default=None, help="grade another selection, e.g. 'chapters' (see the book)")
    grade.add_argument("-v", "--verbose", action="store_true", help="show pytest's own output")

    course = sub.add_parser("course", help="tools for course authors")
    course_sub = course.add_subparsers(dest="course_command", required=True, parser_class=_Parser)
    sync = course_sub.add_parser("sync", help="generate chapters/ from solutions/")
    sync.add_argument("--force", action="store_true", help="overwrite files edited by hand")
    course_sub.add_parser("check", help="fail if chapters/ or a rendered notebook page is stale")
    notebooks = course_sub.add_parser("notebooks", help="run the notebooks and render them into book/src/")
    notebooks.add_argument("names", nargs="*", help="notebooks by number or name (default: all)")
    holes = course_sub.add_parser("holes", help="check that the tests catch every missing region")
    holes.add_argument("chapters", type=int, nargs="*", help="default: every chapter with regions")
    mutants = course_sub.add_parser("mutants", help="check that the tests catch planted bugs in every region")
    mutants.add_argument("chapters", type=int, nargs="*", help="default: every chapter with regions")
    mutants.add_argument("--all", action="store_true", help="try every mutant, not a fixed sample of the larger regions")
    from miniyaie import kernel_harness

    kernel_harness.add_parser(sub)
    return parser


# ---------------------------------------------------------------- generation (miniyaie/generate_cli.py)


def cmd_generate(args) -> int:
    from miniyaie import generate_cli

    try:
        return generate_cli.cmd_generate(args)
    except generate_cli.CommandError as exc:
        raise UsageError(str(exc)) from None


def cmd_chat(args) -> int:
    from miniyaie import generate_cli

    try:
        return generate_cli.cmd_chat(args)
    except generate_cli.CommandError as exc:
        raise UsageError(str(exc)) from None


# ---------------------------------------------------------------- course


def cmd_serve(args) -> int:
    from miniyaie import generate_cli, serve_cli

    try:
        return serve_cli.cmd_serve(args)
    except generate_cli.CommandError as exc:
        raise UsageError(str(exc)) from None


def cmd_bench(args) -> int:
    if args.bench_command == "offline":
        from miniyaie.bench.offline import main as bench_offline
        from miniyaie.model import ModelLoadError

        try:
            return bench_offline(args)
        except ModelLoadError as exc:
            raise UsageError(str(exc)) from None
    from miniyaie import bench_serve

    return bench_serve.cmd_bench_serve(args)


def cmd_grade(args) -> int:
    from miniyaie.course.grade import grade

    return grade(args.chapter, impl=args.impl, verbose=args.verbose)


def cmd_course(args) -> int:
    from miniyaie.course import holes, sync
    from miniyaie.course.registry import CHAPTERS

    if args.course_command == "sync":
        for line in sync.sync(force=args.force):
            print(line)
        print("chapters/ is up to date.")
        return 0
    if args.course_command == "check":
        from miniyaie.course import notebooks

        problems = sync.check()
        for line in problems:
            print(line)
        print("chapters/ is stale: run `miniyaie course sync`." if problems else "chapters/ is up to date.")
        stale_pages = notebooks.check()
        for line in stale_pages:
            print(line)
        print("notebook pages are stale: run `miniyaie course notebooks`." if stale_pages else "notebook pages are up to date.")
        return 1 if problems or stale_pages else 0
    if args.course_command == "notebooks":
        from miniyaie.course import notebooks

        try:
            chosen = notebooks.select(args.names)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return notebooks.render_all(chosen)
    numbers = args.chapters or [ch.number for ch in CHAPTERS if sync.regions_of(ch)]
    if args.course_command == "mutants":
        from miniyaie.course.mutants import MAX_PER_REGION, mutants

        cap, started = (10**9 if args.all else MAX_PER_REGION), time.perf_counter()
        status = max([mutants(number, max_per_region=cap) for number in numbers])
        print(f"course mutants {' '.join(map(str, numbers))}: {time.perf_counter() - started:.0f} s in all")
        return status
    status = 0
    for number in numbers:
        status |= holes.holes(number)
    return status


def cmd_harness(args) -> int:
    from miniyaie import _switch, kernel_harness

    try:
        return kernel_harness.main(args)
    except _switch.ImplError as exc:
        raise UsageError(str(exc)) from None


def _check_chapter(number: int) -> None:
    from miniyaie.course.registry import CHAPTERS

    if number not in {ch.number for ch in CHAPTERS}:
        raise UsageError(f"no chapter {number}; chapters are {CHAPTERS[0].number}-{CHAPTERS[-1].number}")


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        for number in [getattr(args, "chapter", None), *(getattr(args, "chapters", None) or [])]:
            if number is not None:
                _check_chapter(number)
        handler = {"generate": cmd_generate, "chat": cmd_chat, "grade": cmd_grade, "course": cmd_course,
                   "serve": cmd_serve, "bench": cmd_bench, "harness": cmd_harness}[args.command]
        return handler(args)
    except UsageError as exc:
        print(f"miniyaie: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
