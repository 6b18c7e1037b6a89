"""The `miniyaie` command: generate, chat, grade, and the course tools."""

from __future__ import annotations

import argparse
import sys


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
    p.add_argument("--model", default=None, help="a local Hugging Face directory or hub id (default: bundled SmolLM2-135M-Instruct)")
    p.add_argument("--max-tokens", type=_positive_int, default=max_tokens, help=f"new tokens at most (default {max_tokens})")
    p.add_argument("--temperature", type=_non_negative_float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=_probability, default=1.0, help="nucleus sampling mass (default 1)")
    p.add_argument("--seed", type=int, default=None, help="seed for sampling")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="miniyaie", description="Mini-YAIE: an inference engine you build chapter by chapter.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    gen = sub.add_parser("generate", help="continue a prompt (no chat template)")
    gen.add_argument("prompt")
    _add_sampling_args(gen, max_tokens=64)

    chat = sub.add_parser("chat", help="chat with the model (chat template applied)")
    chat.add_argument("--message", default=None, help="send one message, print the reply, exit")
    _add_sampling_args(chat, max_tokens=256)

    grade = sub.add_parser("grade", help="run a chapter's tests on your code (chapters/)")
    grade.add_argument("chapter", type=int)
    grade.add_argument("--impl", default=None, help="grade another selection, e.g. 'chapters' (see the book)")
    grade.add_argument("-v", "--verbose", action="store_true", help="show pytest's own output")

    course = sub.add_parser("course", help="tools for course authors")
    course_sub = course.add_subparsers(dest="course_command", required=True, parser_class=_Parser)
    sync = course_sub.add_parser("sync", help="generate chapters/ from solutions/")
    sync.add_argument("--force", action="store_true", help="overwrite files edited by hand")
    course_sub.add_parser("check", help="fail if chapters/ is stale")
    holes = course_sub.add_parser("holes", help="check that the tests catch every missing region")
    holes.add_argument("chapters", type=int, nargs="*", help="default: every chapter with regions")

    from miniyaie.bench.offline import add_parser as add_bench_parser

    add_bench_parser(sub)
    return parser


# ---------------------------------------------------------------- generation


class _TextStream:
    """Prints text as tokens arrive; holds back a token that ends mid-character."""

    def __init__(self, tokenizer):
        self.tokenizer, self.ids, self.printed = tokenizer, [], 0

    def push(self, token_id: int) -> None:
        self.ids.append(token_id)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if not text.endswith("\ufffd"):
            sys.stdout.write(text[self.printed :])
            sys.stdout.flush()
            self.printed = len(text)


def _load(args):
    import torch

    from miniyaie.model import ModelLoadError, load

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    print(f"Loading {args.model or 'SmolLM2-135M-Instruct (bundled)'} on {device} ...", file=sys.stderr, flush=True)
    try:
        return load(args.model, dtype=dtype, device=device, progress=True)
    except ModelLoadError as exc:
        raise UsageError(str(exc)) from None


def _stream_reply(lm, prompt_ids: list[int], args) -> str:
    from miniyaie.model import PromptTooLongError, SamplingParams, generate_stream

    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed)
    stream = _TextStream(lm.tokenizer)
    try:
        for event in generate_stream(lm.model, [prompt_ids], params, lm.eos_token_ids):
            stream.push(event.token_id)
    except PromptTooLongError as exc:
        raise UsageError(str(exc)) from None
    print()
    return lm.tokenizer.decode(stream.ids, skip_special_tokens=True)


def _chat_ids(tokenizer, messages) -> list[int]:
    if not tokenizer.chat_template:
        raise UsageError("this model has no chat template; use `miniyaie generate`")
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def cmd_generate(args) -> int:
    lm = _load(args)
    prompt_ids = lm.tokenizer(args.prompt)["input_ids"]
    sys.stdout.write(args.prompt)
    _stream_reply(lm, prompt_ids, args)
    return 0


def cmd_chat(args) -> int:
    lm = _load(args)
    if args.message is not None:
        _stream_reply(lm, _chat_ids(lm.tokenizer, [{"role": "user", "content": args.message}]), args)
        return 0
    print("Chat with the model; an empty line or Ctrl-D ends.", file=sys.stderr)
    messages = []
    while True:
        try:
            text = input("> ").strip()
        except EOFError:
            break
        if not text:
            break
        messages.append({"role": "user", "content": text})
        reply = _stream_reply(lm, _chat_ids(lm.tokenizer, messages), args)
        messages.append({"role": "assistant", "content": reply})
    return 0


# ---------------------------------------------------------------- course


def cmd_bench(args) -> int:
    from miniyaie.bench.offline import main as bench_offline
    from miniyaie.model import ModelLoadError

    try:
        return bench_offline(args)
    except ModelLoadError as exc:
        raise UsageError(str(exc)) from None


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
        problems = sync.check()
        for line in problems:
            print(line)
        print("chapters/ is stale: run `miniyaie course sync`." if problems else "chapters/ is up to date.")
        return 1 if problems else 0
    numbers = args.chapters or [ch.number for ch in CHAPTERS if sync.regions_of(ch)]
    status = 0
    for number in numbers:
        status |= holes.holes(number)
    return status


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
        handler = {"generate": cmd_generate, "chat": cmd_chat, "grade": cmd_grade, "course": cmd_course, "bench": cmd_bench}[args.command]
        return handler(args)
    except UsageError as exc:
        print(f"miniyaie: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
