"""Engine settings: the KV pool's size and the scheduler's limits."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

# Chapter 9's settings: checked by its plugin (engine/plugins.py) when any of them is set.
SPECULATIVE_SETTINGS = ("speculative", "draft_model", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max",
                        "max_speculative_step_tokens")


@dataclass(frozen=True)
class EngineConfig:
    block_size: int = 16  # tokens per KV block
    num_blocks: int | None = None  # KV pool size in blocks; or give kv_cache_bytes
    # Used when num_blocks is None. 1 GiB holds 23,296 tokens of SmolLM2 in float32: all 64 requests of the
    # bench's random workload at once (256 MiB held about 23, and each step then carried fewer rows to
    # amortise the weights over). vLLM's CPU backend reserves 4 GiB by default.
    kv_cache_bytes: int = 2**30
    max_num_batched_tokens: int = 512  # the token budget of one step
    max_num_seqs: int = 64
    policy: str = "fcfs"  # or "lpm"
    # A long prefill shares the step (SchedulerConfig; vLLM's flags of the same names): a request with more
    # than this many tokens to compute takes at most this many of a step while others want tokens, and at
    # most max_long_partial_prefills such requests run at once; what nobody else wants goes back to them.
    # 256 = half the default budget: a short request behind an 8,000-token prompt starts within a step or two.
    # 0 turns the bound off.
    long_prefill_token_threshold: int = 256
    max_long_partial_prefills: int = 1
    enable_prefix_caching: bool = True  # the radix prefix cache (chapter 3); False to measure without it
    attention_backend: str = "auto"  # see miniyaie/backends/choose.py
    # Admit only while this fraction of the running requests' remaining outputs still fits
    # (see SchedulerConfig.decode_reserve): 0.3 cut preemptions 19 -> 0 and tokens computed
    # by 14% on the random bench workload in a 256 MiB pool, for 4% more steps (notebook 1 sweeps it).
    decode_reserve: float = 0.3
    # Ranks the model is split over (chapter 7); 1 runs it whole in this process.
    tensor_parallel_size: int = 1
    # True: never replay decode steps as CUDA graphs (miniyaie/backends/cuda_graphs.py; they are used only on a CUDA
    # device with the triton backend), every step runs the model from Python.
    enforce_eager: bool = False
    # True: the host records a step and schedules the next while the model runs (miniyaie/backends/overlap.py).
    # Off by default: on the 2-core CPU it measured within 8% of the plain loop either way; on a GPU not yet.
    overlap_schedule: bool = False
    # Chapter 8's caps on what one structured request may ask (name -> value, e.g. {"max_items": 1000}; the
    # CLI's --structured-limit NAME=VALUE); unnamed ones keep their defaults. Plain data here: chapter 8's
    # plugin checks the names and values (engine/plugins.py).
    structured_limits: tuple[tuple[str, float], ...] = ()
    # Speculative decoding (chapter 9): "ngram" proposes up to num_speculative_tokens drafts per decoding
    # request each step, from the request's own tokens (prompt lookup, n-grams of prompt_lookup_min..max
    # tokens); "draft" from a smaller model sharing the target's tokenizer (draft_model: its path or hub id);
    # one forward scores them all and the target model keeps what it agrees with. None: off.
    speculative: str | None = None
    draft_model: str | None = None
    num_speculative_tokens: int = 4
    prompt_lookup_min: int = 1
    prompt_lookup_max: int = 3
    # A step drafts only while its decoding requests' tokens, drafts included, stay within this: drafts pay
    # while a step is bound by reading the weights. 16 on a 2-core CPU (copy workload, greedy: 3.3x at 1
    # request, 0.88x at 16 with no bound); a GPU stays bound by its weights to far larger steps.
    max_speculative_step_tokens: int = 16
    # Weights in 4- or 8-bit blocks (chapter 10, miniyaie.quant, through the engine plugin 'quantization'): none,
    # int8 (per output channel), int4 (groups of 32 with a minimum; int4-g64, int4-g128, int4-sym...), gguf (a
    # GGUF file's own Q4_1/Q8_0 blocks: the bundled SmolLM2's, 97 MB where float32 holds 538), or auto: gguf
    # for a GGUF file run on the CPU in float32 (twice float32's rate at one request, level at 32), else none.
    quantization: str = "auto"
    # The K/V pool's dtype: auto (the model's), float32 or bfloat16. bfloat16 holds twice the tokens in the same
    # kv_cache_bytes; the cpu and torch attention backends widen K and V to the model's dtype as they read them.
    kv_cache_dtype: str = "auto"
    # LoRA adapters served beside the base weights (chapter 11, miniyaie.lora, through the engine plugin 'lora'): name
    # -> a PEFT directory, each checked when the engine starts; a request picks one by name (SamplingParams.adapter).
    # At most max_loras are resident at once (slots of rank up to max_lora_rank), loaded when a request needs one.
    lora_adapters: dict[str, str] = field(default_factory=dict)
    max_lora_rank: int = 16
    max_loras: int = 4

    def __post_init__(self):
        for name in ("block_size", "kv_cache_bytes", "max_num_batched_tokens", "max_num_seqs", "tensor_parallel_size",
                     "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max", "max_speculative_step_tokens",
                     "max_lora_rank", "max_loras"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        for name in ("enable_prefix_caching", "enforce_eager", "overlap_schedule"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.overlap_schedule and (self.speculative is not None or self.tensor_parallel_size > 1):
            raise ValueError("overlap_schedule works with one process and without speculative decoding")
        from miniyaie.scheduler import POLICIES

        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; choose from {', '.join(sorted(POLICIES))}")
        if self.num_blocks is not None and self.num_blocks < 1:
            raise ValueError(f"num_blocks must be at least 1, got {self.num_blocks}")
        from miniyaie.backends.choose import BACKENDS, KV_CACHE_DTYPES

        if self.attention_backend not in BACKENDS:
            raise ValueError(f"unknown attention_backend {self.attention_backend!r}; choose from {', '.join(BACKENDS)}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"unknown kv_cache_dtype {self.kv_cache_dtype!r}; choose from {', '.join(KV_CACHE_DTYPES)}")
        if self.kv_cache_dtype != "auto" and self.tensor_parallel_size > 1:
            raise ValueError("kv_cache_dtype works with one process: the ranks of tensor parallelism keep the model's dtype")
        if not isinstance(self.long_prefill_token_threshold, int) or self.long_prefill_token_threshold < 0:
            raise ValueError(f"long_prefill_token_threshold must be a whole number >= 0, got {self.long_prefill_token_threshold!r}")
        if not isinstance(self.max_long_partial_prefills, int) or self.max_long_partial_prefills < 1:
            raise ValueError(f"max_long_partial_prefills must be a whole number >= 1, got {self.max_long_partial_prefills!r}")
        from miniyaie.engine.plugins import LORA, SPECULATIVE, STRUCTURED_OUTPUT, plugin  # chapters 8, 9, 11: when asked for

        if any(getattr(self, f.name) != f.default for f in fields(self) if f.name in SPECULATIVE_SETTINGS):
            plugin(SPECULATIVE).check_settings(self)  # chapter 9's: a ValueError naming a wrong or unused setting
        if self.structured_limits:
            limits = dict(self.structured_limits.items() if isinstance(self.structured_limits, dict) else self.structured_limits)
            plugin(STRUCTURED_OUTPUT).check_limits(limits)  # chapter 8's: a ValueError naming an unknown limit or a bad value
            object.__setattr__(self, "structured_limits", tuple(sorted(limits.items())))
        if self.lora_adapters:  # chapter 11's: the names and paths as a dict, or a ValueError naming what is wrong
            object.__setattr__(self, "lora_adapters", plugin(LORA).check_settings(self))
