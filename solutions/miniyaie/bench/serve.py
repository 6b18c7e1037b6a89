"""`miniyaie bench serve`: drive a live OpenAI-compatible server with streaming chat requests.

For each concurrency C, N requests are sent with at most C in flight; each
is a streaming `/v1/chat/completions` call. Per request we time the first
content chunk (TTFT), the gaps between chunks (ITL) and the end (e2e);
per concurrency we report mean/p50/p99 and output tokens per second
(completion tokens over the wall time of the whole batch). Any server that
speaks the OpenAI chat API can be measured, e.g. `transformers serve`.

Every concurrency gets prompts of its own: a server with a prefix cache would
otherwise find the earlier levels' prompts in it and answer faster for a
reason that has nothing to do with concurrency. Each request asks for usage
in the stream (`stream_options.include_usage`); where the server reports
`usage.prompt_tokens_details.cached_tokens`, the share of prompt tokens it
served from its cache is a column of the table. `--sampling sampled` sends
temperature 0.7, top_p 0.9 and top_k 50 (a vLLM extension of the OpenAI
schema, which ours accepts too) instead of temperature 0. Compare servers started
fresh (bench/serve_peers.py does), since what an earlier run left in a
cache still counts.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass, field

from miniyaie.bench.workloads import SAMPLING

WORDS = ("engine cache token block radix tree scheduler batch prefill decode kernel memory page request "
         "stream latency server model attention layer prompt answer story river mountain city garden").split()


@dataclass
class RequestTiming:
    ttft: float | None = None
    itl: list[float] = field(default_factory=list)
    e2e: float = 0.0
    completion_tokens: int = 0
    prompt_tokens: int | None = None  # as the server's usage says, when it says
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, when reported
    error: str | None = None


def summary(values: list[float]) -> dict:
    """mean, p50, p99 in milliseconds (nearest-rank percentiles)."""
    if not values:
        return {"mean_ms": None, "p50_ms": None, "p99_ms": None}
    ordered = sorted(values)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))] * 1000

    return {"mean_ms": statistics.fmean(ordered) * 1000, "p50_ms": pct(0.5), "p99_ms": pct(0.99)}


def prompts(count: int, words: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"Write a long story that uses these words: {' '.join(rng.choice(WORDS) for _ in range(words))}"
            for _ in range(count)]


def prompts_per_level(levels: list[int], count: int, words: int, seed: int) -> list[list[str]]:
    """`count` prompts for each concurrency level, none of them sent at another level.

    One seeded stream of prompts is cut into consecutive slices, so the same
    command sends the same prompts to every server it measures.
    """
    texts = prompts(count * len(levels), words, seed)
    return [texts[i * count : (i + 1) * count] for i in range(len(levels))]


def _record_usage(timing: RequestTiming, usage: dict) -> None:
    timing.completion_tokens = usage.get("completion_tokens") or 0
    timing.prompt_tokens = usage.get("prompt_tokens")
    details = usage.get("prompt_tokens_details") or {}
    timing.cached_tokens = details.get("cached_tokens")


async def one_request(client, url: str, body: dict, timeout: float) -> RequestTiming:
    timing = RequestTiming()
    started = last = time.perf_counter()
    try:
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=timeout) as response:
            if response.status_code != 200:
                timing.error = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                return timing
            chunks = 0
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    _record_usage(timing, chunk["usage"])
                if any((c.get("delta") or {}).get("content") for c in chunk.get("choices", [])):
                    now = time.perf_counter()
                    if timing.ttft is None:
                        timing.ttft = now - started
                    else:
                        timing.itl.append(now - last)
                    last = now
                    chunks += 1
            timing.completion_tokens = timing.completion_tokens or chunks
    except Exception as exc:  # a failed request is reported, not fatal to the benchmark
        timing.error = f"{type(exc).__name__}: {exc}"
    timing.e2e = time.perf_counter() - started
    return timing


async def run_concurrency(url: str, model: str, concurrency: int, texts: list[str], args) -> dict:
    import httpx

    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    limits = httpx.Limits(max_connections=concurrency + 4)
    semaphore = asyncio.Semaphore(concurrency)

    async with httpx.AsyncClient(headers=headers, limits=limits) as client:
        async def bounded(text: str) -> RequestTiming:
            body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": args.max_tokens,
                    **SAMPLING[getattr(args, "sampling", "greedy")], "stream": True}
            if not args.no_stream_usage:
                body["stream_options"] = {"include_usage": True}
            if not args.no_ignore_eos:
                body["ignore_eos"] = True
            async with semaphore:
                return await one_request(client, url, body, args.timeout)

        started = time.perf_counter()
        timings = await asyncio.gather(*(bounded(t) for t in texts))
        wall = time.perf_counter() - started
    ok = [t for t in timings if t.error is None]
    tokens = sum(t.completion_tokens for t in ok)
    # Prompt-cache figures only when every answered request reported them: a partial sum would mislead.
    reported = bool(ok) and all(t.cached_tokens is not None and t.prompt_tokens for t in ok)
    prompt_tokens = sum(t.prompt_tokens for t in ok) if reported else None
    cached = sum(t.cached_tokens for t in ok) if reported else None
    return {
        "concurrency": concurrency, "requests": len(timings), "failed": len(timings) - len(ok),
        "errors": sorted({t.error for t in timings if t.error})[:3],
        "wall_s": wall, "completion_tokens": tokens, "output_tok_per_s": tokens / wall if wall else 0.0,
        "prompt_tokens": prompt_tokens, "cached_tokens": cached,
        "cached_share": cached / prompt_tokens if reported else None,
        "ttft": summary([t.ttft for t in ok if t.ttft is not None]),
        "itl": summary([gap for t in ok for gap in t.itl]),
        "e2e": summary([t.e2e for t in ok]),
    }


def _model_of(url: str, api_key: str | None) -> str:
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    data = httpx.get(f"{url}/v1/models", headers=headers, timeout=30).json()["data"]
    return data[0]["id"]


def format_table(rows: list[dict]) -> str:
    def ms(x):
        return "-" if x is None else f"{x:.1f}"

    lines = ["conc  reqs fail  out tok/s  cached  TTFT mean/p50/p99 ms      ITL mean/p50/p99 ms     e2e mean/p50/p99 ms"]
    for r in rows:
        cols = [f"{ms(r[k]['mean_ms'])}/{ms(r[k]['p50_ms'])}/{ms(r[k]['p99_ms'])}" for k in ("ttft", "itl", "e2e")]
        cached = "-" if r.get("cached_share") is None else f"{r['cached_share']:.1%}"
        lines.append(f"{r['concurrency']:>4} {r['requests']:>5} {r['failed']:>4} {r['output_tok_per_s']:>10.1f}  {cached:>6}  "
                     f"{cols[0]:<24} {cols[1]:<22} {cols[2]}")
    lines.append("cached: prompt tokens the server says came from its prefix cache (- : it does not say)")
    return "\n".join(lines)


def plot(rows: list[dict], path: str, url: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conc = [r["concurrency"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(conc, [r["output_tok_per_s"] for r in rows], marker="o")
    left.set(title="Output throughput", xlabel="concurrent streaming clients", ylabel="output tokens / s", xscale="log")
    right.plot(conc, [r["ttft"]["p50_ms"] for r in rows], marker="o", label="TTFT p50")
    right.plot(conc, [r["itl"]["p50_ms"] for r in rows], marker="s", label="ITL p50")
    right.set(title="Latency", xlabel="concurrent streaming clients", ylabel="milliseconds", xscale="log")
    right.legend()
    fig.suptitle(f"miniyaie bench serve — {url}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(args) -> int:
    """Run `miniyaie bench serve` with the parsed flags (cli/bench.py); exit status."""
    try:
        levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        print(f"miniyaie: error: --concurrency must be whole numbers >= 1, got {args.concurrency!r}", file=sys.stderr)
        return 2
    url = args.url.rstrip("/")
    try:
        model = args.model or _model_of(url, args.api_key)
    except Exception as exc:
        print(f"miniyaie: error: cannot reach {url}/v1/models: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    rows = []
    for level, texts in zip(levels, prompts_per_level(levels, args.num_requests, args.prompt_words, args.seed)):
        rows.append(asyncio.run(run_concurrency(url, model, level, texts, args)))
        print(f"concurrency {level}: {rows[-1]['output_tok_per_s']:.1f} output tok/s", file=sys.stderr, flush=True)
    print(f"{url}  model {model}  {args.num_requests} requests x {args.max_tokens} tokens per concurrency, "
          f"{getattr(args, 'sampling', 'greedy')}")
    print(format_table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"url": url, "model": model, "args": {k: v for k, v in vars(args).items() if k != "api_key"},
                       "results": rows}, f, indent=2, default=str)
    if args.plot:
        plot(rows, args.plot, url)
    return 1 if any(r["failed"] for r in rows) else 0
