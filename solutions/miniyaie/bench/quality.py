"""`miniyaie bench quality`: what weights in blocks cost in model quality, measured against the float32 model.

The speed tables say what 4- and 8-bit weights save; this says what they cost, two ways. Perplexity on a
fixed text that ships with the course (quality_text.txt: the prose of chapter 0's page, frozen so that
tables measured on different days compare while the pages keep changing), and greedy agreement with the float32
model on fixed chat prompts: a quantization can move the perplexity by a fraction of a percent and still
change what a user reads. Every variant is the same transformers model with its projections swapped for
blocks (miniyaie.quant), run by transformers' own forward and generate, so only the weights differ; a
"+kv-bf16" variant also rounds keys and values as a bfloat16 K/V cache holds them (kv_rounding.py).
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import math
import platform
import re
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

DEFAULT_VARIANTS = ("none", "int8", "int4-g32", "int4-g64", "int4-sym-g32", "gguf", "kv-bf16", "gguf+kv-bf16")  # SmolLM2's 576 is no multiple of 128
BUNDLED_NOTE = ("the bundled model's float32 weights are its Q4_1 file dequantized (4-bit, groups of 32, with a "
                "minimum): int4-g32 finds that same grid again and gguf holds the same weights, so both cost next to "
                "nothing here; a model with float weights shows what int4 costs")
PROMPTS = (  # varied on purpose: a quantization error shows first where the model is least sure
    "What is the capital of Australia?",
    "Write a Python function that returns the n-th Fibonacci number.",
    "What is 17 times 23? Answer with the number only.",
    "List five fruits that are red.",
    "Translate into French: The weather is nice today.",
    "Explain in two sentences what photosynthesis is.",
    "Write a haiku about the sea.",
    "Who wrote the play Romeo and Juliet?",
    "Sort these numbers from smallest to largest: 42, 7, 19, 3, 88.",
    "What does the HTTP status code 404 mean?",
    "Give me three tips for sleeping better.",
    "Write a SQL query that counts the rows of a table named users.",
    "If a train travels 60 km in 45 minutes, what is its speed in km/h?",
    "What is the boiling point of water at sea level in Fahrenheit?",
    "Summarize the plot of Cinderella in one sentence.",
    "Name the planets of the solar system in order from the Sun.",
)


def plain_text(markdown: str) -> str:
    """A book page as prose: code, markup and mdBook directives removed, so the text is what a reader reads."""
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)
    text = re.sub(r"\{\{#.*?\}\}|<[^>\n]+>|!\[[^\]]*\]\([^)]*\)", "", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link: its words
    text = re.sub(r"^\s*(#+|[-*>]|\d+\.)\s+", "", text, flags=re.M)  # headings, list markers, quotes
    text = re.sub(r"^[\s|:-]+$", "", text, flags=re.M)  # table rules
    text = re.sub(r"[*`|]", "", text)
    return re.sub(r"\n{3,}", "\n\n", re.sub(r"[ \t]+", " ", text)).strip()


def book_text(book_dir: Path | None = None) -> str:
    """The chapter pages (ch0*.md, in file-name order) as one plain text: what quality_text.txt was cut from."""
    if book_dir is None:
        from miniyaie._switch import REPO_ROOT

        book_dir = REPO_ROOT / "book" / "src"
    pages = sorted(Path(book_dir).glob("ch0*.md"))
    if not pages:
        raise FileNotFoundError(f"no chapter pages (ch0*.md) in {book_dir}")
    return "\n\n".join(plain_text(p.read_text()) for p in pages)


QUALITY_TEXT = Path(__file__).with_name("quality_text.txt")  # book_text() of 2026-11-29, chapter 0 up to its challenge


def quality_text() -> str:
    """The fixed text perplexity is measured on (5,860 tokens with SmolLM2's tokenizer)."""
    return QUALITY_TEXT.read_text()


def perplexity(model: nn.Module, ids: Sequence[int] | torch.Tensor, window: int) -> float:
    """exp(mean negative log-likelihood) of every token given the tokens before it in its window.

    The ids are cut into consecutive windows of `window` tokens, each a separate forward call, so a window's
    first token is context only. ValueError when no token is predicted (fewer than 2 ids).
    """
    ids = torch.as_tensor(ids, dtype=torch.long).view(-1)
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, ids.numel(), window):
            chunk = ids[start : start + window]
            if chunk.numel() < 2:
                continue
            logits = model(chunk[None], use_cache=False).logits[0, :-1].float()
            total += float(F.cross_entropy(logits, chunk[1:], reduction="sum"))
            count += chunk.numel() - 1
    if count == 0:
        raise ValueError("perplexity needs at least 2 tokens")
    return math.exp(total / count)


def greedy_outputs(model: nn.Module, prompts: Sequence[Sequence[int]], new_tokens: int,
                   eos_token_id: int | list[int] | None = None, pad_token_id: int | None = None) -> list[list[int]]:
    """Each prompt's greedy continuation (token ids, up to `new_tokens`, the end-of-sequence token included),
    from transformers' generate with its KV cache, one prompt at a time (no padding to get wrong)."""
    outputs = []
    with torch.no_grad():
        for prompt in prompts:
            x = torch.tensor([list(prompt)], dtype=torch.long)
            out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new_tokens, do_sample=False,
                                 use_cache=True, eos_token_id=eos_token_id, pad_token_id=pad_token_id)
            outputs.append(out[0, x.shape[1] :].tolist())
    return outputs


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens a and b share: the position of their first difference."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass
class Agreement:
    exact: int  # outputs equal to the reference's, token for token
    total: int
    mean_prefix: float  # tokens before the first difference, averaged over prompts
    mean_prefix_fraction: float  # that prefix over the longer output's length: 1.0 only for an equal output


def greedy_agreement(reference: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]]) -> Agreement:
    """How far each output follows the reference output of the same prompt."""
    if len(reference) != len(outputs) or not reference:
        raise ValueError(f"need as many outputs as reference outputs (at least one), got {len(outputs)} and {len(reference)}")
    prefixes = [common_prefix(r, o) for r, o in zip(reference, outputs)]
    fractions = [p / max(len(r), len(o)) if max(len(r), len(o)) else 1.0 for p, r, o in zip(prefixes, reference, outputs)]
    return Agreement(sum(list(r) == list(o) for r, o in zip(reference, outputs)), len(reference),
                     sum(prefixes) / len(prefixes), sum(fractions) / len(fractions))


def quantized_copy(model: nn.Module, scheme: str, gguf_path: str | Path | None = None) -> nn.Module:
    """A deep copy of `model` with its weights in blocks of `scheme` (the model itself for "none"); "<scheme>-a8"
    also rounds the activations of every linear over blocks to 8 bits (miniyaie/weights/int8_activations.py)."""
    from miniyaie.quant import parse_scheme, quantize_model
    from miniyaie.weights.int8_activations import split_scheme, use_int8_activations

    scheme, a8 = split_scheme(scheme)
    if parse_scheme(scheme).kind == "none":
        return model
    quantized = copy.deepcopy(model)
    if parse_scheme(scheme).kind == "gguf":
        # the GGUF loader reads chapter 0's config names for the q/k row order; a transformers config has others
        config = quantized.config
        config.num_heads, config.num_kv_heads = config.num_attention_heads, config.num_key_value_heads
    quantize_model(quantized, scheme, gguf_path=gguf_path)
    if a8:
        use_int8_activations(quantized)
    return quantized.eval()


def measure(model: nn.Module, ids: Sequence[int], window: int, prompts: Sequence[Sequence[int]], new_tokens: int,
            **generate_kwargs) -> tuple[float, list[list[int]]]:
    """One variant's perplexity on `ids` and its greedy outputs for `prompts`."""
    return perplexity(model, ids, window), greedy_outputs(model, prompts, new_tokens, **generate_kwargs)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run(args) -> dict:
    """Load the float32 model once, then measure it and a quantized copy per variant."""
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from miniyaie.model.loader import DEFAULT_MODEL, bundled_gguf, eos_token_ids, resolve_model_path
    from miniyaie.bench.kv_rounding import kv_rounded, split_kv
    from miniyaie.quant import weight_bytes

    path = resolve_model_path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    gguf_path = bundled_gguf() if args.model in (None, DEFAULT_MODEL) else None
    ids = tokenizer(quality_text(), add_special_tokens=False)["input_ids"][: args.tokens]
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                             tokenize=True, return_dict=True)["input_ids"] for p in PROMPTS[: args.prompts]]
    eos = eos_token_ids(path, tokenizer) or None
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos or [0])[0]
    gen = dict(eos_token_id=eos, pad_token_id=pad)

    variants = ["none"] + [v for v in args.variants if v != "none"]  # float32 first: it is the reference
    rows, reference, base_ppl = [], None, None
    for name in variants:
        started = time.perf_counter()
        weights, kv_dtype = split_kv(name)
        try:
            variant = quantized_copy(model, weights, gguf_path)
        except ValueError as exc:  # a scheme that cannot apply to this model (a width the group does not divide)
            rows.append(dict(variant=name, skipped=str(exc)))
            print(f"  {name}: not applicable: {exc}", file=sys.stderr, flush=True)
            continue
        with kv_rounded(variant, kv_dtype):  # "+kv-bf16": keys and values as a bfloat16 cache holds them
            ppl, outputs = measure(variant, ids, args.window, prompts, args.new_tokens, **gen)
        if reference is None:
            reference, base_ppl = outputs, ppl
        agreement = greedy_agreement(reference, outputs)
        rows.append(dict(variant=name, weight_mb=round(weight_bytes(variant) / 1e6, 1), perplexity=round(ppl, 4),
                         ppl_change_pct=round(100 * (ppl / base_ppl - 1), 3), **asdict(agreement),
                         seconds=round(time.perf_counter() - started, 1)))
        print(f"  {name}: perplexity {ppl:.3f}, {agreement.exact}/{agreement.total} outputs equal float32's "
              f"({rows[-1]['seconds']} s)", file=sys.stderr, flush=True)
        del variant
    return dict(
        command="miniyaie " + shlex.join(sys.argv[1:]),
        model=str(path), text=f"miniyaie/bench/quality_text.txt, first {len(ids)} tokens",
        text_sha256=hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16], window=args.window,
        prompts=len(prompts), new_tokens=args.new_tokens, cpu=cpu_name(), threads=torch.get_num_threads(),
        torch=torch.__version__, transformers=transformers.__version__,
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), rows=rows,
        note=BUNDLED_NOTE if gguf_path is not None else None)


def format_table(report: dict) -> str:
    """The report as a markdown table, headed by what made it (command, machine, versions, date)."""
    lines = [f"`{report['command']}`", "",
             f"{report['cpu']}, {report['threads']} threads, torch {report['torch']}, transformers "
             f"{report['transformers']}, {report['date']}; perplexity on {report['text']} (windows of "
             f"{report['window']}); greedy: {report['prompts']} chat prompts x {report['new_tokens']} new tokens", "",
             "| variant | weight MB | perplexity | vs float32 | same output as float32 | mean matching prefix |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in (r for r in report["rows"] if "skipped" not in r):
        lines.append(f"| {r['variant']} | {r['weight_mb']:.1f} | {r['perplexity']:.3f} | {r['ppl_change_pct']:+.2f}% | "
                     f"{r['exact']}/{r['total']} | {r['mean_prefix']:.1f} tokens ({r['mean_prefix_fraction']:.0%}) |")
    lines += [f"\n{r['variant']}: not applicable: {r['skipped']}" for r in report["rows"] if "skipped" in r]
    return "\n".join(lines + ([f"\nNote: {report['note']}"] if report.get("note") else []))


def main(args) -> int:
    report = run(args)
    print(format_table(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0
