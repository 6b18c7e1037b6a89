"""`miniyaie generate` and `miniyaie chat`, on the engine of chapter 5 (InferenceEngine).

Chapter code is imported only after `--impl` is applied, so the command runs
whichever chapters the learner selected (like `pytest --impl`).
"""

from __future__ import annotations

import sys

SAMPLING_FLAGS = ("max_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "seed", "stop")


class CommandError(Exception):
    """Reported by cli.py as one line, exit status 2."""


def _engine(args, default_max_tokens: int):
    """An InferenceEngine for the command's --model / --config / --device / --impl."""
    from miniyaie import _switch

    if getattr(args, "impl", None):
        try:
            _switch.select(args.impl)
        except _switch.ImplError as exc:
            raise CommandError(str(exc)) from None
    import torch

    from miniyaie.engine import EngineError, InferenceEngine, SamplingParams
    from miniyaie.engine.config_file import EngineSettings, load_settings

    try:
        settings = load_settings(args.config) if args.config else EngineSettings(sampling=SamplingParams(max_tokens=default_max_tokens))
        overrides = {name: getattr(args, name) for name in SAMPLING_FLAGS if getattr(args, name, None) is not None}
        sampling = settings.sampling.with_updates(**overrides)
        device = args.device or settings.device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = getattr(torch, settings.dtype) if settings.dtype else None
        model = args.model or settings.model
        print(f"Loading {model or 'SmolLM2-135M-Instruct (bundled)'} on {device} ...", file=sys.stderr, flush=True)
        return InferenceEngine(model, settings.engine, sampling_defaults=sampling, device=device, dtype=dtype)
    except EngineError as exc:
        raise CommandError(str(exc)) from None


def _stream(engine, prompt: str, prompt_token_ids: list[int] | None = None) -> str:
    from miniyaie.engine import CompletionDelta, EngineError

    text = []
    try:
        for item in engine.stream(prompt, prompt_token_ids=prompt_token_ids):
            if isinstance(item, CompletionDelta) and item.text:
                sys.stdout.write(item.text)
                sys.stdout.flush()
                text.append(item.text)
    except EngineError as exc:
        raise CommandError(str(exc)) from None
    print()
    return "".join(text)


def cmd_generate(args) -> int:
    with _engine(args, default_max_tokens=64) as engine:  # imports chapter code: --impl first
        from miniyaie.engine import EngineError

        if len(args.prompt) == 1:
            sys.stdout.write(args.prompt[0])
            _stream(engine, args.prompt[0])
            return 0
        try:  # several prompts: one batch, printed in order when done
            results = engine.generate(args.prompt)
        except EngineError as exc:
            raise CommandError(str(exc)) from None
        for i, (prompt, result) in enumerate(zip(args.prompt, results)):
            print(f"--- [{i}] ({result.completion_tokens} tokens, {result.finish_reason})")
            print(prompt + result.text)
    return 0


def _chat_reply(engine, messages: list[dict]) -> str:
    from miniyaie.engine import EngineError

    try:
        prompt, ids = engine.render_chat(messages)
    except EngineError as exc:
        raise CommandError(str(exc)) from None
    return _stream(engine, prompt, ids)


def cmd_chat(args) -> int:
    with _engine(args, default_max_tokens=256) as engine:
        if args.message is not None:
            _chat_reply(engine, [{"role": "user", "content": args.message}])
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
            messages.append({"role": "assistant", "content": _chat_reply(engine, messages)})
    return 0
