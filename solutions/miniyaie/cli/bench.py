"""`miniyaie bench serve`, `bench offline`, `bench compare`, `bench quality`, `bench setup-vllm` and
`bench setup-llamacpp`: the flags; the measuring lives in miniyaie.bench."""

from __future__ import annotations

import argparse

from miniyaie.cli.args import Parser, UsageError, add_scheduling_args, non_negative_int, positive_int, scheduling_overrides


def _range(text: str) -> tuple[int, int]:
    """'32:256' -> (32, 256); '32' -> (32, 32)."""
    try:
        low, _, high = text.partition(":")
        low, high = int(low), int(high or low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or LOW:HIGH, got {text!r}") from None
    if not 1 <= low <= high:
        raise argparse.ArgumentTypeError(f"need 1 <= LOW <= HIGH, got {text!r}")
    return low, high


def _machine(text: str) -> str:
    """'GBPS,GFLOPS', both > 0 (checked here, parsed by bench/roofline.py)."""
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != 2 or not all(v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected GBPS,GFLOPS (two numbers > 0), got {text!r}")
    return text


def _peers(text: str) -> list[str]:
    from miniyaie.bench.offline import PEERS

    names = [p for p in text.split(",") if p and p != "none"]
    unknown = [p for p in names if p not in PEERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown peer {unknown[0]!r}; choose from {', '.join(PEERS)} or none")
    return names


def _variants(text: str) -> list[str]:
    """'none,int8,gguf+kv-bf16' -> the names, each a quantization scheme (checked as --quantization checks it),
    with "+kv-bf16" for keys and values rounded as a bfloat16 K/V cache holds them ("kv-bf16": float32 weights)."""
    from miniyaie.weights.engine_plugin import check_scheme as parse_scheme

    names = [v.strip() for v in text.split(",") if v.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list of quantizations")
    from miniyaie.bench.kv_rounding import split_kv

    for name in names:
        try:
            parse_scheme(split_kv(name)[0])
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return list(dict.fromkeys(names))


def add_parsers(sub) -> None:
    bench = sub.add_parser("bench", help="benchmarks")
    bench.set_defaults(handler=cmd_bench)
    bench_sub = bench.add_subparsers(dest="bench_command", required=True, parser_class=Parser)

    p = bench_sub.add_parser("serve", help="TTFT, ITL, e2e latency and output tok/s of a live server at several concurrencies")
    p.add_argument("--url", default="http://127.0.0.1:8000", help="the server's base URL (default http://127.0.0.1:8000)")
    p.add_argument("--model", default=None, help="model name to request (default: the first of /v1/models)")
    p.add_argument("--concurrency", default="1,4,16", help="comma-separated concurrencies (default 1,4,16)")
    p.add_argument("--num-requests", type=positive_int, default=32, help="requests per concurrency (default 32)")
    p.add_argument("--max-tokens", type=positive_int, default=64, help="tokens per answer (default 64)")
    p.add_argument("--prompt-words", type=positive_int, default=48, help="random words per prompt (default 48)")
    p.add_argument("--sampling", choices=("greedy", "sampled"), default="greedy",
                   help="greedy (temperature 0, default) or sampled (temperature 0.7, top_p 0.9, top_k 50 in every request)")
    p.add_argument("--no-ignore-eos", action="store_true", help="do not send ignore_eos (for servers that refuse it)")
    p.add_argument("--no-stream-usage", action="store_true",
                   help="do not send stream_options.include_usage (for servers that refuse it; no cached-token column then)")
    p.add_argument("--api-key", default=None, help="bearer key, if the server needs one")
    p.add_argument("--seed", type=int, default=0, help="seed of the prompts; every concurrency gets prompts of its own")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    p.add_argument("--json", default=None, metavar="OUT", help="write the results as JSON")
    p.add_argument("--plot", default=None, metavar="OUT.png", help="plot tok/s and p50 TTFT against concurrency")

    from miniyaie.bench.offline import DEFAULT_PEERS
    from miniyaie.bench.llamacpp_env import ENV_VAR as LLAMACPP_ENV_VAR
    from miniyaie.bench.vllm_env import ENV_VAR

    p = bench_sub.add_parser("offline", help="offline throughput against transformers, side by side")
    p.add_argument("--workload", choices=("random", "shared-prefix", "copy"), default="random",
                   help="copy: requests to repeat a passage (speculative decoding's workload; runs ours without and "
                        "with n-gram speculation unless --speculative is given)")
    p.add_argument("--sampling", choices=("greedy", "sampled"), default="greedy",
                   help="how every request of every system chooses its tokens: greedy (default; outputs compared token "
                        "for token) or sampled (temperature 0.7, top-p 0.9, top-k 50; outputs differ, compare tok/s)")
    add_scheduling_args(p)  # the engine's scheduling knobs (EngineConfig)
    p.add_argument("--num-requests", type=int, default=None, help="random: 64; shared-prefix: 32 (4 groups of 8); copy: 16")
    p.add_argument("--input-len", type=_range, default=(32, 256), help="random: prompt length range (default 32:256)")
    p.add_argument("--output-len", type=_range, default=None, help="output length range (random 32:128, shared-prefix 32, copy 128)")
    p.add_argument("--prefix-len", type=int, default=512, help="shared-prefix: tokens each group shares (default 512)")
    p.add_argument("--question-len", type=int, default=32, help="shared-prefix: tokens after the prefix (default 32)")
    p.add_argument("--group-size", type=int, default=8, help="shared-prefix: prompts per group (default 8)")
    p.add_argument("--peers", type=_peers, default=list(DEFAULT_PEERS),
                   help="comma-separated: hf-static, hf-cb, vllm, llamacpp (batch 1, the bundled GGUF), or none "
                        "(default hf-static,hf-cb)")
    p.add_argument("--vllm-python", default=None, metavar="PATH",
                   help=f"the Python of vLLM's environment, for --peers vllm (default: ${ENV_VAR}; see bench setup-vllm)")
    p.add_argument("--vllm-dtype", choices=["float32", "bfloat16"], default=None,
                   help="vLLM's dtype (default: bfloat16 where the CPU has AVX512-BF16 or AMX, else float32)")
    p.add_argument("--llamacpp-python", default=None, metavar="PATH",
                   help=f"the Python of llama.cpp's environment, for --peers llamacpp (default: ${LLAMACPP_ENV_VAR}; "
                        "see bench setup-llamacpp)")
    p.add_argument("--no-floor", action="store_true", help="skip timing the no-attention baseline (our step shapes with attention a no-op)")
    p.add_argument("--tensor-parallel-size", type=positive_int, default=1, metavar="N",
                   help="also run our engine split over N processes (chapter 7; default 1: not run)")
    p.add_argument("--machine", type=_machine, default=None, metavar="GBPS,GFLOPS",
                   help="bandwidth and FLOP/s for the decode steps' roofline (default: measured, a copy and a matmul)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: the CPUs this process may use)")
    p.add_argument("--model", default=None, help="a local Hugging Face directory (default: bundled SmolLM2-135M-Instruct)")
    p.add_argument("--json", default=None, metavar="OUT", help="write the results as JSON")
    p.add_argument("--plot", default=None, metavar="OUT.png", help="draw the output tok/s bars")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(runs_engine=True)  # relaunched on the fast CPU runtime, as vLLM's peer runs (cli/main.py)

    p = bench_sub.add_parser("compare", help="time two shell commands fairly: warm-ups left out, runs side by side, medians")
    p.add_argument("command_a", help="the first command (run through the shell, output discarded)")
    p.add_argument("command_b", help="the second command")
    p.add_argument("--runs", type=positive_int, default=10, help="measured runs of each (default 10; at least 3)")
    p.add_argument("--warmup", type=non_negative_int, default=1, help="runs of each before measuring (default 1)")
    p.add_argument("--names", default=None, help="two comma-separated names for the table (default A,B)")
    p.add_argument("--json", default=None, metavar="OUT", help="write every run's time and the verdict as JSON")

    from miniyaie.bench.quality import DEFAULT_VARIANTS, PROMPTS

    p = bench_sub.add_parser("quality", help="what weight quantization costs: perplexity and greedy agreement with float32")
    p.add_argument("--variants", type=_variants, default=list(DEFAULT_VARIANTS),
                   help=f"comma-separated quantizations (default {','.join(DEFAULT_VARIANTS)}); none (float32, the "
                        "reference) is always measured; gguf needs the bundled model; +kv-bf16 (or kv-bf16 alone) "
                        "also rounds keys and values as a bfloat16 K/V cache holds them")
    p.add_argument("--tokens", type=positive_int, default=4096,
                   help="perplexity over the first N tokens of the shipped text, bench/quality_text.txt (default 4096)")
    p.add_argument("--window", type=positive_int, default=512, help="tokens per perplexity forward call (default 512)")
    p.add_argument("--prompts", type=positive_int, default=len(PROMPTS),
                   help=f"fixed chat prompts for greedy agreement, at most {len(PROMPTS)} (default {len(PROMPTS)})")
    p.add_argument("--new-tokens", type=positive_int, default=64, help="greedy tokens per prompt (default 64)")
    p.add_argument("--model", default=None, help="a local Hugging Face directory (default: bundled SmolLM2-135M-Instruct)")
    p.add_argument("--json", default=None, metavar="OUT", help="write the table as JSON")

    from miniyaie.bench import vllm_env

    p = bench_sub.add_parser("setup-vllm", help="make a virtual environment with vLLM's CPU build, the peer of --peers vllm")
    vllm_env.add_arguments(p)

    from miniyaie.bench import llamacpp_env

    p = bench_sub.add_parser("setup-llamacpp", help="make a virtual environment with llama-cpp-python built from source, "
                                                    "the peer of --peers llamacpp")
    llamacpp_env.add_arguments(p)


def cmd_bench(args: argparse.Namespace) -> int:
    if args.bench_command == "setup-vllm":
        from miniyaie.bench import vllm_env

        return vllm_env.setup(args.venv, args.python, args.dry_run)
    if args.bench_command == "setup-llamacpp":
        from miniyaie.bench import llamacpp_env

        return llamacpp_env.setup(args.venv, args.python, args.dry_run)
    if args.bench_command == "compare":
        from miniyaie.bench.compare import main as bench_compare

        try:
            return bench_compare(args)
        except ValueError as exc:  # too few runs
            raise UsageError(str(exc)) from None
    if args.bench_command == "offline":
        from miniyaie.bench.offline import main as bench_offline
        from miniyaie.model import ModelLoadError

        overrides = scheduling_overrides(args)
        if "num_speculative_tokens" in overrides and "speculative" not in overrides and args.workload != "copy":
            raise UsageError("--num-speculative-tokens is used only with --speculative (or --workload copy, which runs "
                             "ours without and with n-gram speculation)")
        try:
            return bench_offline(args, overrides)
        except ModelLoadError as exc:
            raise UsageError(str(exc)) from None
    if args.bench_command == "quality":
        from miniyaie.bench.quality import PROMPTS
        from miniyaie.bench.quality import main as bench_quality
        from miniyaie.model import ModelLoadError

        if args.tokens < 2 or args.window < 2:
            raise UsageError("--tokens and --window must be at least 2: perplexity predicts a token from the ones before it")
        if args.prompts > len(PROMPTS):
            raise UsageError(f"--prompts {args.prompts}: there are {len(PROMPTS)} fixed prompts")
        from miniyaie.bench.kv_rounding import split_kv

        if any(split_kv(v)[0].startswith("gguf") for v in args.variants) and args.model not in (None, "smollm2"):
            raise UsageError("variant gguf runs a GGUF file's own blocks: only the bundled model comes from one")
        try:
            return bench_quality(args)
        except ModelLoadError as exc:
            raise UsageError(str(exc)) from None
    from miniyaie.bench.serve import main as bench_serve

    return bench_serve(args)
