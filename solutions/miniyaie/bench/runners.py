"""The systems a benchmark times: our engine, its no-attention baseline, and transformers' two generate loops.

Each runner takes the same `Workload` and returns a `Result`; each counts
only useful output tokens (a padded row's tokens past its request's length
do not count).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

from miniyaie.bench.workloads import Workload
from miniyaie.engine import EngineConfig, LLMEngine, SamplingParams
from miniyaie.model import AttentionMetadata, CausalLM, KVCache


@dataclass
class Result:
    system: str
    seconds: float
    output_tokens: int
    prompt_tokens: int
    stats: dict = field(default_factory=dict)

    @property
    def tokens_per_second(self) -> float:
        return self.output_tokens / self.seconds


def _bar(desc: str, total: int, show: bool) -> tqdm:
    return tqdm(total=total, desc=desc, unit="tok", disable=not show, leave=False, dynamic_ncols=True)


def run_engine(model: CausalLM, workload: Workload, config: EngineConfig, name: str, progress: bool = True,
               engine: LLMEngine | None = None, sampling: dict | None = None) -> Result:
    """Our engine on the workload (a fresh LLMEngine, or `engine`, e.g. rank 0 of a tensor-parallel one);
    records each step's shape (tokens, sampled rows) for the floor, its chunks and its time (for the roofline of
    its decode steps, bench/roofline.py), and each request's tokens (to compare with a peer's).
    `sampling`: SamplingParams fields every request gets (bench/workloads.py's SAMPLING; default greedy)."""
    engine = engine or LLMEngine(model, config)
    tokens = {engine.add_request(prompt, SamplingParams(max_tokens=n, ignore_eos=True, **(sampling or {}))): []
              for prompt, n in zip(workload.prompts, workload.output_lens)}
    shapes, chunks, seconds_each = [], [], []
    schedule = engine.scheduler.schedule

    def recording_schedule():  # each step's chunks as (new tokens, context, samples): Task 5.16's SeqStep
        out = schedule()
        chunks.append([(c.num_tokens, c.start, c.samples_next_token) for c in out.chunks])
        return out

    engine.scheduler.schedule = recording_schedule
    try:
        with _bar(name, workload.num_output_tokens, progress) as bar:
            start = time.perf_counter()
            while engine.has_unfinished():
                computed = engine.counters["computed_tokens"]
                began = time.perf_counter()
                events = engine.step()
                seconds_each.append(time.perf_counter() - began)
                shapes.append((engine.counters["computed_tokens"] - computed, len(events)))
                for event in events:
                    tokens[event.request_id].append(event.token_id)
                bar.update(len(events))
            seconds = time.perf_counter() - start
    finally:
        del engine.scheduler.schedule  # the engine's own again, also when a step raised
    stats = dict(engine.stats, step_shapes=shapes, step_chunks=chunks, step_seconds=seconds_each, outputs=list(tokens.values()),
                 enable_prefix_caching=config.enable_prefix_caching, speculative=config.speculative,
                 num_speculative_tokens=config.num_speculative_tokens, prompt_lookup_min=config.prompt_lookup_min,
                 prompt_lookup_max=config.prompt_lookup_max)
    stats["hit_rate"] = stats["cached_tokens"] / workload.num_prompt_tokens
    return Result(name, seconds, workload.num_output_tokens, workload.num_prompt_tokens, stats)


def run_tensor_parallel(path, workload: Workload, config: EngineConfig, size: int, progress: bool = True,
                        sampling: dict | None = None) -> Result:
    """Our engine split over `size` processes (chapter 7), on the same workload; start-up is not timed."""
    from miniyaie.distributed import TensorParallelRuntime

    runtime = TensorParallelRuntime.start(path, size)
    try:
        engine = LLMEngine(runtime.model, config)
        runtime.attach(engine, config.attention_backend)
        return run_engine(runtime.model, workload, config, f"miniyaie, tensor parallel x{size}", progress, engine, sampling)
    finally:
        runtime.close()


# ANCHOR: no_attention_baseline
class NoAttention:
    """An attention backend that does nothing: what is left is the rest of the model (the no-attention baseline:
    our own step schedule without attention; not a limit, since a better step schedule beats it)."""

    def forward(self, q, k, v, k_cache, v_cache, meta, scale):
        return q


def run_floor(model: CausalLM, engine_result: Result, progress: bool = True) -> Result:
    """The same steps as `engine_result` (tokens and sampled rows), through the model with attention
    replaced by a no-op and no scheduler: the time the weights' matmuls alone take on this machine."""
    shapes = engine_result.stats["step_shapes"]
    saved, model.backend = model.backend, NoAttention()
    device = model.lm_head.weight.device
    pool = KVCache(model.config, 1, model.lm_head.weight.dtype, device)
    try:
        with _bar("no-attention baseline", engine_result.output_tokens, progress) as bar:
            start = time.perf_counter()
            for num_tokens, num_sampled in shapes:
                ids = torch.zeros(num_tokens, dtype=torch.int64, device=device)
                meta = AttentionMetadata([num_tokens], [num_tokens], ids, ids[None, :1], 1)
                hidden = model(ids, torch.arange(num_tokens, device=device), pool, meta)
                model.compute_logits(hidden[:num_sampled]).argmax(-1).tolist()
                bar.update(num_sampled)
            seconds = time.perf_counter() - start
    finally:
        model.backend = saved
    return Result("no-attention baseline", seconds, engine_result.output_tokens, engine_result.prompt_tokens)
# ANCHOR_END: no_attention_baseline


def run_hf_static(hf_model, workload: Workload, batch_size: int = 16, progress: bool = True,
                  sampling: dict | None = None) -> Result:
    """transformers `generate` in static batches: left-padded, each batch runs to its longest output
    (greedy, or sampling with `sampling`'s temperature, top_p and top_k)."""
    from transformers import GenerationConfig

    pad = 0
    with _bar(f"hf generate (static {batch_size})", workload.num_output_tokens, progress) as bar:
        start = time.perf_counter()
        for i in range(0, len(workload.prompts), batch_size):
            prompts = workload.prompts[i : i + batch_size]
            lens = workload.output_lens[i : i + batch_size]
            width = max(map(len, prompts))
            ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=hf_model.device)
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=hf_model.device)
            sample = bool(sampling and sampling.get("temperature"))
            config = GenerationConfig(
                do_sample=sample, max_new_tokens=max(lens), min_new_tokens=max(lens), pad_token_id=pad, eos_token_id=None,
                **({k: sampling[k] for k in ("temperature", "top_p", "top_k") if k in sampling} if sample else {})
            )
            with torch.inference_mode():
                out = hf_model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
            if out.shape[1] - width != max(lens):
                raise RuntimeError(f"transformers generated {out.shape[1] - width} tokens, expected {max(lens)}")
            bar.update(sum(lens))
        seconds = time.perf_counter() - start
    return Result(f"hf generate (static {batch_size})", seconds, workload.num_output_tokens, workload.num_prompt_tokens)


def run_hf_continuous(hf_model, workload: Workload, kv_cache_bytes: int, progress: bool = True) -> Result:
    """transformers' continuous batching manager, each request with its own max_new_tokens, no EOS.

    Its cache gets what the whole workload needs at once, capped at our engine's byte budget (left
    to itself it sizes the cache from free memory, and its warm-up fills it: minutes of zeros on a
    big-memory CPU). The warm-up runs before the clock starts, as our engine's start-up does."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    name = "hf continuous batching"
    page_size = ContinuousBatchingConfig.page_size
    config = hf_model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    bytes_per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * hf_model.dtype.itemsize
    pages = sum(-(-(len(p) + n) // page_size) for p, n in zip(workload.prompts, workload.output_lens))
    num_blocks = max(1, min(pages, kv_cache_bytes // (bytes_per_token * page_size)))
    cb_config = ContinuousBatchingConfig(num_blocks=num_blocks)
    with _bar(name, workload.num_output_tokens, progress) as bar:
        with hf_model.continuous_batching_context_manager(continuous_batching_config=cb_config) as manager:
            start = time.perf_counter()
            wanted = {}
            for prompt, n in zip(workload.prompts, workload.output_lens):
                wanted[manager.add_request(prompt, max_new_tokens=n, eos_token_id=-1)] = n
            while wanted:
                result = manager.get_result(timeout=600)
                if result is None:
                    raise RuntimeError("transformers' continuous batching stopped before every request finished")
                if result.request_id in wanted and result.is_finished():
                    if result.error:
                        raise RuntimeError(f"transformers' continuous batching failed: {result.error}")
                    if len(result.generated_tokens) != wanted[result.request_id]:
                        raise RuntimeError("transformers' continuous batching returned the wrong number of tokens")
                    bar.update(wanted.pop(result.request_id))
            seconds = time.perf_counter() - start
    return Result(name, seconds, workload.num_output_tokens, workload.num_prompt_tokens)
