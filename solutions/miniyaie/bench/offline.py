"""`miniyaie bench offline`: our engine and transformers on the same prompts, in one process.

    miniyaie bench offline --workload random|shared-prefix|copy [--sampling greedy|sampled] [--num-requests N]
        [--peers hf-static,hf-cb,vllm,llamacpp] [--vllm-python PATH] [--llamacpp-python PATH]
        [--machine GBPS,GFLOPS] [--json OUT] [--plot OUT.png]

Every system gets the same random-token prompts (seed 0) and must produce
exactly each request's output length (`ignore_eos`). transformers runs in
this process; vLLM, which needs its own torch, in a child process of its
own environment (bench/vllm_peer.py), with the same number of threads;
llama.cpp likewise (bench/llamacpp_peer.py), at batch 1 on the bundled
model's GGUF file, the requests one after another.
The table gives output tokens per second, our speed over each other
system's, and our share of the no-attention baseline: the same step
shapes through the model with attention replaced by a no-op, timed in the
same run. `--sampling sampled` makes every request of every system sample
(temperature 0.7, top_p 0.9, top_k 50; bench/workloads.py's SAMPLING):
sampled outputs differ from engine to engine, so only the speeds compare.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from dataclasses import replace

from miniyaie.backends.cpu import runtime as cpu_runtime
from miniyaie.bench.workloads import SAMPLING, Workload, copy_workload, random_workload, shared_prefix_workload

PEERS = ("hf-static", "hf-cb", "vllm", "llamacpp")
DEFAULT_PEERS = ("hf-static", "hf-cb")  # vllm and llamacpp need environments of their own: asked for by name


def make_workload(args, vocab_size: int, path=None) -> Workload:
    if args.workload == "copy":  # text, so it needs the model's tokenizer
        from transformers import AutoTokenizer

        return copy_workload(AutoTokenizer.from_pretrained(path), args.num_requests or 16, (args.output_len or (128, 128))[0])
    if args.workload == "random":
        return random_workload(args.num_requests or 64, vocab_size, args.input_len, args.output_len or (32, 128))
    n = args.num_requests or 32
    group_size = min(args.group_size, n)
    output = (args.output_len or (32, 32))[0]
    return shared_prefix_workload(max(1, n // group_size), group_size, vocab_size, args.prefix_len, args.question_len, output)


def run(args, config_overrides: dict | None = None) -> dict:
    """Run every system on the workload; returns the report (also what --json writes).

    config_overrides: EngineConfig fields the caller's flags set (the CLI's scheduling flags)."""
    import torch
    from transformers import AutoModelForCausalLM

    from miniyaie.bench.runners import Result, run_engine, run_floor, run_hf_continuous, run_hf_static, run_tensor_parallel
    from miniyaie.bench.vllm_peer import PeerFailed, PeerSkipped, run_vllm
    from miniyaie.engine import EngineConfig
    from miniyaie.model import load_model, resolve_model_path
    from miniyaie.weights.engine_plugin import resolve_scheme
    from miniyaie.quant.linear import bytes_per_weight

    threads = args.threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)  # the same for every system; see book/src/ch05_performance.md
    progress = not args.no_progress
    path = resolve_model_path(args.model)
    # the weights generate and serve would run (auto: the bundled model in its GGUF file's blocks)
    scheme = resolve_scheme((config_overrides or {}).get("quantization", EngineConfig().quantization), args.model,
                            "cpu", torch.float32)
    if scheme == "gguf" or scheme.endswith("-a8"):
        from miniyaie.weights.engine_plugin import load_quantized

        model = load_quantized(args.model, scheme, torch.float32, "cpu").model
    else:
        from miniyaie.quant import quantize_model

        model = load_model(path)
        quantize_model(model, scheme)
    workload = make_workload(args, model.config.vocab_size, path)
    block_size = EngineConfig().block_size
    mode = getattr(args, "sampling", "greedy")
    sampling = SAMPLING[mode]
    engine = lambda config, name: run_engine(model, workload, config, name, progress, sampling=sampling)  # noqa: E731

    # The engine's defaults (and the scheduling flags'); only the prefix cache and the policy change (LPM where it pays).
    overrides = dict(config_overrides or {})
    spec_only = {}  # --num-speculative-tokens without --speculative: for the copy workload's speculative run
    if "speculative" not in overrides and "num_speculative_tokens" in overrides:
        spec_only["num_speculative_tokens"] = overrides.pop("num_speculative_tokens")
    base = EngineConfig(**overrides)
    ours: list[Result] = []
    if workload.name == "shared-prefix":
        ours.append(engine(replace(base, enable_prefix_caching=False), "miniyaie (prefix cache off)"))
        ours.append(engine(replace(base, enable_prefix_caching=True, policy="lpm"), "miniyaie (prefix cache on)"))
    elif workload.name == "copy" and base.speculative is None:  # the same engine without and with n-gram drafts
        ours.append(engine(base, "miniyaie"))
        spec = replace(base, speculative="ngram", **spec_only)
        ours.append(engine(spec, f"miniyaie (n-gram speculation, k={spec.num_speculative_tokens})"))
    else:
        ours.append(engine(base, "miniyaie"))
    best = ours[-1]
    results = list(ours)
    if args.tensor_parallel_size > 1:  # the best configuration again, split over processes
        config = replace(base, enable_prefix_caching=best.stats["enable_prefix_caching"],
                              policy="lpm" if workload.name == "shared-prefix" else "fcfs")
        split = run_tensor_parallel(path, workload, config, args.tensor_parallel_size, progress, sampling)
        ours.append(split)
        results.append(split)
    floor = None if args.no_floor else run_floor(model, best, progress)
    if floor:
        results.append(floor)
    not_run = []  # peers asked for that gave no figure, and why
    if "hf-static" in args.peers or "hf-cb" in args.peers:
        hf_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        if "hf-static" in args.peers:
            results.append(run_hf_static(hf_model, workload, progress=progress, sampling=sampling))
        if "hf-cb" in args.peers and mode != "greedy":  # its manager takes no sampling settings per request
            not_run.append(dict(system="hf continuous batching", status="skipped", reason="greedy only (--sampling greedy)"))
        elif "hf-cb" in args.peers:
            results.append(run_hf_continuous(hf_model, workload, EngineConfig().kv_cache_bytes, progress=progress))
    if "vllm" in args.peers:
        if progress:
            print("vllm: running in its own environment (start-up, not timed, takes about a minute) ...", flush=True)
        try:  # the same prefix-cache setting as our best run
            speculative = best.stats["speculative"] and dict(  # vLLM's names for the same n-gram drafts
                method="ngram", num_speculative_tokens=best.stats["num_speculative_tokens"],
                prompt_lookup_min=best.stats["prompt_lookup_min"], prompt_lookup_max=best.stats["prompt_lookup_max"])
            results.append(run_vllm(workload, str(path), threads, best.stats["enable_prefix_caching"], args.vllm_python,
                                    speculative=speculative, sampling=sampling if mode != "greedy" else None,
                                    dtype=getattr(args, "vllm_dtype", None)))
        except PeerSkipped as exc:
            not_run.append(dict(system="vllm", status="skipped", reason=str(exc)))
        except PeerFailed as exc:
            not_run.append(dict(system="vllm", status="failed", reason=str(exc)))
    if "llamacpp" in args.peers:
        from miniyaie.bench.llamacpp_peer import run_llamacpp

        if mode != "greedy":
            not_run.append(dict(system="llamacpp", status="skipped", reason="greedy only (--sampling greedy)"))
        else:
            try:  # on the bundled model's GGUF file (PeerSkipped for another model)
                results.append(run_llamacpp(workload, threads, getattr(args, "llamacpp_python", None), model=args.model))
            except PeerSkipped as exc:
                not_run.append(dict(system="llamacpp", status="skipped", reason=str(exc)))
            except PeerFailed as exc:
                not_run.append(dict(system="llamacpp", status="failed", reason=str(exc)))

    from miniyaie.bench import roofline

    machine = roofline.parse_machine(args.machine) if args.machine else roofline.measure_machine(model.lm_head.weight.dtype, model.lm_head.weight.device)
    decode = roofline.decode_steps(model.config, best.stats["step_chunks"], best.stats["step_seconds"], machine,
                                   model.lm_head.weight.element_size(), bytes_per_weight(model))
    rows = []
    for r in results:
        row = dict(system=r.system, seconds=round(r.seconds, 3), output_tokens=r.output_tokens,
                   prompt_tokens=r.prompt_tokens, output_tok_s=round(r.tokens_per_second, 2))
        if r is not best:
            row["ours_over_this"] = round(best.tokens_per_second / r.tokens_per_second, 3)
        if r in ours:
            row["hit_rate"] = round(r.stats["hit_rate"], 4)
            row["num_preemptions"] = r.stats["num_preemptions"]
            row["steps"] = r.stats["steps"]
            if r.stats["draft_tokens"]:  # speculative decoding: how much of the drafts the model kept
                row["acceptance_rate"] = round(r.stats["accepted_draft_tokens"] / r.stats["draft_tokens"], 4)
                row["mean_accepted_length"] = round(
                    (r.stats["accepted_draft_tokens"] + r.stats["verified_steps"]) / r.stats["verified_steps"], 3)
        if r is not best and "outputs" in r.stats and mode == "greedy":  # a system that returned its tokens: how many equal ours
            row["same_tokens_as_ours"] = sum(a == b for a, b in zip(r.stats["outputs"], best.stats["outputs"]))
        if r.stats.get("note"):
            row["note"] = r.stats["note"]
        rows.append(row)
    report = dict(
        workload=workload.name,
        sampling=dict(mode=mode, **sampling),
        num_requests=len(workload.prompts),
        prompt_tokens=workload.num_prompt_tokens,
        output_tokens=workload.num_output_tokens,
        optimum_hit_rate=round(workload.optimum_hit_rate(block_size), 4),
        efficiency_vs_floor=round(best.tokens_per_second / floor.tokens_per_second, 3) if floor else None,
        model=str(path),
        weights=scheme,
        threads=threads,
        machine=f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} CPUs".strip(),
        torch=torch.__version__,
        runtime=cpu_runtime.loaded(),  # OpenMP and malloc under our engine, the floor and transformers
        block_size=block_size,
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        rows=rows,
        not_run=not_run,
        decode_steps=decode,  # our best run's decode steps: measured next to the roofline (Task 5.16)
    )
    return report


def format_table(report: dict) -> str:
    sampling = report.get("sampling", {"mode": "greedy"})
    settings = ", ".join(f"{k} {v}" for k, v in sampling.items() if k != "mode")
    lines = [
        f"workload {report['workload']}, {sampling['mode']} ({settings}): {report['num_requests']} requests, "
        f"{report['prompt_tokens']} prompt tokens, "
        f"{report['output_tokens']} output tokens; {report['threads']} threads, torch {report['torch']}, {report['date']}"
        + (f"; our weights: {report['weights']}" if "weights" in report else ""),
        *([f"runtime of our process: OpenMP {report['runtime']['openmp']}, malloc {report['runtime']['malloc']}"]
          if "runtime" in report else []),
        f"{'system':34} {'seconds':>8} {'out tok/s':>10} {'ours/this':>10} {'hit rate':>9} {'preempt':>8}",
    ]
    for row in report["rows"]:
        ratio = f"{row['ours_over_this']:.2f}x" if "ours_over_this" in row else "-"
        hit = f"{row['hit_rate']:.1%}" if "hit_rate" in row else ""
        pre = str(row.get("num_preemptions", ""))
        lines.append(f"{row['system']:34} {row['seconds']:8.1f} {row['output_tok_s']:10.1f} {ratio:>10} {hit:>9} {pre:>8}")
    for peer in report.get("not_run", []):
        lines.append(f"{peer['system']}: {peer['status']}: {peer['reason']}")
    for row in report["rows"]:
        if "same_tokens_as_ours" in row:
            lines.append(f"{row['system']}: {row['same_tokens_as_ours']} of {report['num_requests']} outputs equal ours token for token")
        if "note" in row:
            lines.append(f"{row['system']}: {row['note']}")
        if "acceptance_rate" in row:
            lines.append(f"{row['system']}: {row['acceptance_rate']:.1%} of the drafts accepted, "
                         f"{row['mean_accepted_length']:.2f} tokens per verification, {row['steps']} steps")
    if sampling["mode"] != "greedy":
        lines.append("sampled: each system draws its own tokens, so outputs differ; compare the tok/s")
    if report["efficiency_vs_floor"] is not None:
        lines.append(f"ours / no-attention baseline: {report['efficiency_vs_floor']:.0%}")
    if report.get("decode_steps"):
        from miniyaie.bench.roofline import format_line

        lines.append(format_line(report["decode_steps"]))
    if report["workload"] == "shared-prefix":
        lines.append(f"prefix-cache hit rate optimum for this workload: {report['optimum_hit_rate']:.1%}")
    return "\n".join(lines)


def plot(report: dict, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    fig, ax = plt.subplots(figsize=(8, 4))
    bars = ax.barh([r["system"] for r in rows][::-1], [r["output_tok_s"] for r in rows][::-1], color="tab:blue")
    ax.bar_label(bars, fmt="%.1f", padding=3)
    ax.set_xlabel("output tokens per second (higher is better)")
    ax.set_ylabel("system")
    ax.set_title(
        f"Offline throughput, {report['workload']} workload: {report['num_requests']} requests\n"
        f"{report['threads']} CPU threads, {report['date']}"
    )
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(args, config_overrides: dict | None = None) -> int:
    report = run(args, config_overrides)
    print(format_table(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    if args.plot:
        plot(report, args.plot)
    return 1 if any(peer["status"] == "failed" for peer in report["not_run"]) else 0
