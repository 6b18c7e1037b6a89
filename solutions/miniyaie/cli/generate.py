"""`miniyaie generate` and `miniyaie chat`, on the engine of chapter 5 (InferenceEngine)."""

from __future__ import annotations

import argparse
import sys

from miniyaie.cli.args import UsageError, add_lora_args, add_sampling_args
from miniyaie.cli.engine_from_flags import build_engine


def add_parsers(sub) -> None:
    gen = sub.add_parser("generate", help="continue prompts (no chat template); several prompts run as one batch")
    gen.add_argument("prompt", nargs="+")
    add_sampling_args(gen, max_tokens=64)
    _add_adapter_args(gen)
    gen.set_defaults(handler=cmd_generate, runs_engine=True)

    chat = sub.add_parser("chat", help="chat with the model (chat template applied)")
    chat.add_argument("--message", default=None, help="send one message, print the reply, exit")
    add_sampling_args(chat, max_tokens=256)
    _add_adapter_args(chat)
    chat.set_defaults(handler=cmd_chat, runs_engine=True)


def _add_adapter_args(p: argparse.ArgumentParser) -> None:
    add_lora_args(p)
    p.add_argument("--adapter", default=None, metavar="NAME",
                   help="answer with the LoRA adapter NAME (given by --lora or the config's lora_adapters; chapter 11)")


def _adapter(args: argparse.Namespace) -> dict:
    """The keyword that picks the adapter, or nothing for the base model alone."""
    return {"adapter": args.adapter} if args.adapter else {}


def _stream(engine, prompt: str, prompt_token_ids: list[int] | None = None, **adapter) -> str:
    from miniyaie.engine import CompletionDelta, EngineError

    text = []
    try:
        for item in engine.stream(prompt, prompt_token_ids=prompt_token_ids, **adapter):
            if isinstance(item, CompletionDelta) and item.text:
                sys.stdout.write(item.text)
                sys.stdout.flush()
                text.append(item.text)
    except EngineError as exc:
        raise UsageError(str(exc)) from None
    print()
    return "".join(text)


def cmd_generate(args: argparse.Namespace) -> int:
    with build_engine(args, default_max_tokens=64) as engine:  # imports chapter code: --impl first
        from miniyaie.engine import EngineError

        if len(args.prompt) == 1:
            sys.stdout.write(args.prompt[0])
            _stream(engine, args.prompt[0], **_adapter(args))
            return 0
        try:  # several prompts: one batch, printed in order when done
            results = engine.generate(args.prompt, **_adapter(args))
        except EngineError as exc:
            raise UsageError(str(exc)) from None
        for i, (prompt, result) in enumerate(zip(args.prompt, results)):
            print(f"--- [{i}] ({result.completion_tokens} tokens, {result.finish_reason})")
            print(prompt + result.text)
    return 0


def _chat_reply(engine, messages: list[dict], **adapter) -> str:
    from miniyaie.engine import EngineError

    try:
        prompt, ids = engine.render_chat(messages)
    except EngineError as exc:
        raise UsageError(str(exc)) from None
    return _stream(engine, prompt, ids, **adapter)


def cmd_chat(args: argparse.Namespace) -> int:
    with build_engine(args, default_max_tokens=256) as engine:
        if args.message is not None:
            _chat_reply(engine, [{"role": "user", "content": args.message}], **_adapter(args))
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
            messages.append({"role": "assistant", "content": _chat_reply(engine, messages, **_adapter(args))})
    return 0
