"""`miniyaie grade` (for learners) and `miniyaie course ...` (for course authors)."""

from __future__ import annotations

import argparse
import time

from miniyaie.cli.args import Parser, UsageError


def add_parsers(sub) -> None:
    grade = sub.add_parser("grade", help="run a chapter's (or one task's) tests on your code (chapters/)")
    grade.add_argument("chapter", help="a chapter (5) or one of its tasks (5.1)")
    grade.add_argument("--impl", default=None, help="grade another selection, e.g. 'chapters' (see the book)")
    grade.add_argument("-v", "--verbose", action="store_true", help="show pytest's own output")
    grade.set_defaults(handler=cmd_grade)

    course = sub.add_parser("course", help="tools for course authors")
    course.set_defaults(handler=cmd_course)
    course_sub = course.add_subparsers(dest="course_command", required=True, parser_class=Parser)
    sync = course_sub.add_parser("sync", help="generate chapters/ from solutions/")
    sync.add_argument("--force", action="store_true", help="overwrite files edited by hand")
    course_sub.add_parser("check", help="fail if chapters/, a hint page, a rendered notebook page or a figure is stale")
    share = course_sub.add_parser("share", help="print the learner-written share of each chapter's code")
    share.add_argument("chapters", type=int, nargs="*", help="default: every chapter with regions")
    notebooks = course_sub.add_parser("notebooks", help="run the notebooks and render them into book/src/")
    notebooks.add_argument("names", nargs="*", help="notebooks by number or name (default: all)")
    figures = course_sub.add_parser("figures", help="draw the chapter pages' figures into book/src/figures/")
    figures.add_argument("names", nargs="*", help="figures by chapter number or name (default: all)")
    holes = course_sub.add_parser("holes", help="check that the tests catch every missing region")
    holes.add_argument("chapters", type=int, nargs="*", help="default: this commit's group of chapters")
    holes_which = holes.add_mutually_exclusive_group()
    holes_which.add_argument("--all", action="store_true", help="check every chapter with regions")
    holes_which.add_argument("--turn", type=int, default=None,
                             help="check the group of turn T (default: this commit's number on its branch)")
    mutants = course_sub.add_parser("mutants", help="check that the tests catch planted bugs in every region")
    mutants.add_argument("chapters", type=int, nargs="*", help="default: every chapter with regions")
    which = mutants.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true", help="try every mutant (default: this commit's slice of them)")
    which.add_argument("--turn", type=int, default=None,
                       help="try the slice of turn T (default: this commit's number on its branch)")


def check_chapter(number: int) -> None:
    from miniyaie.course.registry import CHAPTERS

    if number not in {ch.number for ch in CHAPTERS}:
        raise UsageError(f"no chapter {number}; chapters are {CHAPTERS[0].number}-{CHAPTERS[-1].number}")


def cmd_grade(args: argparse.Namespace) -> int:
    from miniyaie.course.grade import grade

    number, _, task = args.chapter.partition(".")
    if not number.isdigit() or (task and not task.isdigit()):
        raise UsageError(f"grade takes a chapter (5) or a task (5.1), got {args.chapter!r}")
    check_chapter(int(number))
    if task:
        from miniyaie.course.registry import chapter
        from miniyaie.course.sync import regions_of

        tasks = sorted({r.task for r in regions_of(chapter(int(number)))}, key=lambda t: int(t.split(".")[1]))
        if args.chapter not in tasks:
            raise UsageError(f"chapter {number} has no Task {args.chapter}; its tasks are {', '.join(tasks)}")
    return grade(int(number), impl=args.impl, verbose=args.verbose, task=args.chapter if task else None)


def cmd_course(args: argparse.Namespace) -> int:
    from miniyaie.course import holes, sync
    from miniyaie.course.registry import CHAPTERS

    if args.course_command == "sync":
        from miniyaie.course import hints

        for line in sync.sync(force=args.force) + hints.write_pages():
            print(line)
        print("chapters/ and book/src/hints/ are up to date.")
        return _ladders()
    if args.course_command == "check":
        return _check()
    if args.course_command == "notebooks":
        from miniyaie.course import notebooks

        try:
            chosen = notebooks.select(args.names)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return notebooks.render_all(chosen)
    if args.course_command == "figures":
        from miniyaie.course import figures

        try:
            chosen = figures.select(args.names)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        for path in figures.build(chosen):
            print(f"wrote {path.relative_to(figures.REPO_ROOT).as_posix()}")
        return 0
    for number in args.chapters:
        check_chapter(number)
    numbers = args.chapters or [ch.number for ch in CHAPTERS if sync.regions_of(ch)]
    if args.course_command == "share":
        from miniyaie.course.share import format_shares

        print(format_shares(numbers))
        return 0
    if args.course_command == "mutants":
        return _mutants(numbers, args)
    if not args.chapters and not args.all:
        numbers = _holes_turn(numbers, args.turn)
    status = 0
    for number in numbers:
        status |= holes.holes(number)
    return status


def _holes_turn(numbers: list[int], turn: int | None) -> list[int]:
    """The chapters of this turn's group (course/rotation.py), saying which and why."""
    from miniyaie.course.rotation import HOLES_GROUPS, commit_turn, holes_in_turn

    turn, source = (turn, "given by --turn") if turn is not None else commit_turn()
    chosen = holes_in_turn(numbers, turn)
    print(f"Checking the holes of chapters {' '.join(map(str, chosen))}: turn {turn}, {source}. Any "
          f"{len(HOLES_GROUPS)} successive turns check every chapter; `miniyaie course holes --all` checks them all "
          f"now, `--turn {turn}` repeats this run.", flush=True)
    return chosen


def _mutants(numbers: list[int], args: argparse.Namespace) -> int:
    from miniyaie.course.mutants import mutants
    from miniyaie.course.rotation import SLICES, commit_turn

    started, chosen = time.perf_counter(), " ".join(map(str, numbers))
    turn = None
    if not args.all:
        turn, source = (args.turn, "given by --turn") if args.turn is not None else commit_turn()
        print(f"Trying one slice of each chapter's mutants: turn {turn}, {source}. Any {max(SLICES.values())} "
              f"successive turns try every mutant; `miniyaie course mutants {chosen} --all` tries them all now, "
              f"`--turn {turn}` repeats this run.", flush=True)
    status = max([mutants(number, turn) for number in numbers])
    print(f"course mutants {chosen}: {time.perf_counter() - started:.0f} s in all")
    return status


def _ladders() -> int:
    """Print the hint-ladder errors; 1 when there is one."""
    from miniyaie.course import hints

    errors = hints.all_problems()
    for line in errors:
        print(f"error: {line}")
    return 1 if errors else 0


def _check() -> int:
    from miniyaie.course import figures, notebooks, sync

    problems = sync.check()
    for line in problems:
        print(line)
    print("chapters/ or book/src/hints/ is stale: run `miniyaie course sync`." if problems
          else "chapters/ is up to date.")
    bad_ladders = _ladders()
    stale_pages = notebooks.check()
    for line in stale_pages:
        print(line)
    print("notebook pages are stale: run `miniyaie course notebooks`." if stale_pages else "notebook pages are up to date.")
    stale_figures = figures.check()
    for line in stale_figures:
        print(line)
    print("chapter figures are stale: run `miniyaie course figures`." if stale_figures else "chapter figures are up to date.")
    return 1 if problems or bad_ladders or stale_pages or stale_figures else 0
