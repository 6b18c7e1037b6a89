"""Argument types and flags that several commands share; bad input is one line and exit status 2."""

from __future__ import annotations

import argparse


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        raise UsageError(message)


def _whole_number(text: str, minimum: int, bound: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
    return value


def positive_int(text: str) -> int:
    return _whole_number(text, 1, "at least 1")


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def probability(text: str) -> float:
    value = non_negative_float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {value}")
    return value


def add_sampling_args(p: argparse.ArgumentParser, max_tokens: int) -> None:
    """The engine and sampling flags of generate and chat."""
    # defaults are None: a flag overrides the --config file's sampling section, which overrides the defaults
    p.add_argument("--model", default=None, help="a local Hugging Face directory or hub id (default: bundled SmolLM2-135M-Instruct)")
    p.add_argument("--max-tokens", type=positive_int, default=None, help=f"new tokens at most (default {max_tokens})")
    p.add_argument("--temperature", type=non_negative_float, default=None, help="0 = greedy (default)")
    p.add_argument("--top-p", type=probability, default=None, help="nucleus sampling mass (default 1)")
    p.add_argument("--top-k", type=int, default=None, help="sample from the k most likely tokens (default: all)")
    p.add_argument("--min-p", type=non_negative_float, default=None, help="drop tokens below min-p x the best one's probability")
    p.add_argument("--repetition-penalty", type=non_negative_float, default=None, help=">1 discourages repeats (default 1)")
    p.add_argument("--stop", action="append", default=None, help="a stop string (repeatable)")
    p.add_argument("--seed", type=int, default=None, help="seed for sampling")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--config", default=None, help="engine settings: a YAML or TOML file (engine:, sampling:, resource:)")
    p.add_argument("--impl", default=None, help="run your chapters, e.g. 'chapters' or 'engine=chapters' (see the book)")
    p.add_argument("--attention-backend", default=None, metavar="NAME",
                   help="cpu (C++ decode attention, oneDNN linears), torch, reference, triton (chapter 4's kernels) "
                        "or auto = triton on CUDA, cpu elsewhere, but reference for your chapter 0 and triton for your "
                        "chapter 4 when MINIYAIE_IMPL selects them (default: the config's, else auto)")
    p.add_argument("--tensor-parallel-size", type=positive_int, default=None, metavar="N",
                   help="split the model over N processes on this machine (chapter 7; default: the config's, else 1)")
    add_enforce_eager_arg(p)


def non_negative_int(text: str) -> int:
    return _whole_number(text, 0, ">= 0")


SCHEDULING_FLAGS = ("long_prefill_token_threshold", "max_long_partial_prefills", "enforce_eager", "overlap_schedule",
                    "speculative", "num_speculative_tokens", "draft_model", "quantization", "kv_cache_dtype")


def _quantization(text: str) -> str:
    from miniyaie.weights.engine_plugin import check_scheme  # chapter 10's

    try:
        return check_scheme(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_enforce_eager_arg(p: argparse.ArgumentParser) -> None:
    """--enforce-eager, and speculative decoding's flags (chapter 9): how the engine runs its steps."""
    p.add_argument("--quantization", type=_quantization, default=None, metavar="{auto,none,int8,int4,gguf}",
                   help="weights in blocks: int8 per channel, int4 in groups of 32 with a minimum (int4-g64, int4-g128; "
                        "int4-sym: without one), gguf (a GGUF file's own blocks, as they are), none (float weights) or "
                        "auto: gguf for the bundled model on the CPU, none otherwise; a scheme with -a8 (gguf-a8, int4-a8, ...) also "
                        "rounds activations to 8 bits for integer dot products (faster, not exact; CPU); "
                        "default: the config's, else auto")
    p.add_argument("--kv-cache-dtype", choices=["auto", "float32", "bfloat16"], default=None,
                   help="the K/V pool's dtype: bfloat16 holds twice the tokens in the same bytes (read by the cpu and "
                        "torch attention backends); auto: the model's (default: the config's, else auto)")
    p.add_argument("--enforce-eager", action="store_true", default=None,
                   help="never replay decode steps as CUDA graphs (they are used only on a GPU with the triton backend)")
    p.add_argument("--overlap-schedule", action="store_true", default=None,
                   help="record each step and schedule the next while the model runs (default: the config's, else off)")
    p.add_argument("--speculative", choices=["ngram", "draft"], default=None,
                   help="speculative decoding: ngram proposes drafts from the request's own tokens, draft from "
                        "--draft-model; one step verifies them (default: the config's, else off)")
    p.add_argument("--num-speculative-tokens", type=positive_int, default=None, metavar="K",
                   help="drafts per request and step with --speculative (default: the config's, else 4)")
    p.add_argument("--draft-model", default=None, metavar="PATH",
                   help="with --speculative draft: a smaller model with the same tokenizer (a directory or hub id)")


def add_scheduling_args(p: argparse.ArgumentParser) -> None:
    """The scheduler's knobs an operator may turn (EngineConfig's fields of the same names; chapter 1)."""
    p.add_argument("--long-prefill-token-threshold", type=non_negative_int, default=None, metavar="N",
                   help="a prompt with more than N tokens to go takes at most N tokens of a step while other "
                        "requests want them (default: the config's, else 256; 0 = no bound)")
    p.add_argument("--max-long-partial-prefills", type=positive_int, default=None, metavar="N",
                   help="long prompts prefilled at once while other requests want tokens (default: the config's, else 1)")
    add_enforce_eager_arg(p)


def lora_module(text: str) -> tuple[str, str]:
    """NAME=PATH of --lora: an adapter's served name and its PEFT directory."""
    name, sep, path = text.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=PATH (a name for the adapter, its PEFT directory), got {text!r}")
    return name.strip(), path.strip()


def add_lora_args(p: argparse.ArgumentParser) -> None:
    """Chapter 11's flags: LoRA adapters served beside the base model (EngineConfig's lora_adapters, max_loras, ...)."""
    p.add_argument("--lora", type=lora_module, action="append", default=None, metavar="NAME=PATH",
                   help="serve the LoRA adapter in PATH (PEFT's adapter_config.json + adapter_model.safetensors) as "
                        "NAME (repeatable; chapter 11; added to the config's lora_adapters)")
    p.add_argument("--max-loras", type=positive_int, default=None, metavar="N",
                   help="adapters resident at once; more are loaded on demand (default: the config's, else 4)")
    p.add_argument("--max-lora-rank", type=positive_int, default=None, metavar="R",
                   help="the largest adapter rank served (default: the config's, else 16)")


def lora_overrides(args, configured: dict[str, str]) -> dict:
    """The EngineConfig fields the LoRA flags set: --lora adds to the config's adapters (a name given twice is an error)."""
    overrides = {name: getattr(args, name) for name in ("max_loras", "max_lora_rank") if getattr(args, name, None) is not None}
    given = getattr(args, "lora", None) or []
    if given:
        adapters = dict(configured)
        for name, path in given:
            if name in adapters:
                raise UsageError(f"--lora {name}={path}: the adapter name {name!r} is already given "
                                 f"({adapters[name]}); each adapter needs its own name")
            adapters[name] = path
        overrides["lora_adapters"] = adapters
    return overrides


def scheduling_overrides(args) -> dict:
    """The EngineConfig fields the scheduling flags (and --enforce-eager) set (a flag left out keeps the config's value)."""
    return {name: getattr(args, name) for name in SCHEDULING_FLAGS if getattr(args, name, None) is not None}
