"""Decode steps replayed as CUDA graphs: one launch for the whole model instead of hundreds from Python.

Why: a batch-1 decode step of SmolLM2 on an H200 ran 1.2 ms of kernels in
13.2 ms of wall time; the rest was Python launching ~460 kernels one by one
(book/src/ch04_triton_kernels.md). A CUDA graph records a step's kernels
once and replays them with one call. It replays the same addresses and the
same launch sizes, so (vLLM's and SGLang's design):

- the step's inputs go into static buffers (static_inputs.py), and a batch
  is padded up to the nearest size of a ladder (1, 2, 4, 8, 16, 24, ... up
  to a cap); one graph per size, all sharing one memory pool;
- attention runs with sizes fixed per padded size (static_decode_attention.py);
- only pure decode steps of at most the cap's rows, with contexts within the
  buffers' bound, replay; prefill, mixed steps and bigger batches run eagerly.

Graphs are used only on a CUDA device with the triton backend, and not with
`EngineConfig(enforce_eager=True)` (the CLI's `--enforce-eager`). The model
body is captured; the LM head and sampling run after it, on the real rows.

`replay="eager"` runs the very same static-buffer function at each "replay"
instead of a recorded graph: everything but torch.cuda.CUDAGraph itself, so
that CPU tests cover the padding, the buffers and the scratch rows.
"""

from __future__ import annotations

import time

import torch

from miniyaie.backends.merged_projections import MergedProjectionOps, merge_projections
from miniyaie.backends.static_decode_attention import StaticDecodeBackend, static_num_splits
from miniyaie.backends.static_inputs import DEFAULT_LADDER_CAP, StaticDecodeInputs, batch_ladder, padded_size

# Device memory kept out of the KV pool for the graphs' private pool (activations of <= 64 decode rows,
# decode partials; a few MiB for SmolLM2). The measured figure is `DecodeGraphRunner.memory_bytes`.
GRAPH_MEMORY_RESERVE = 64 * 2**20


def decode_graphs_mode(requested: str, config, device: torch.device | str) -> str:
    """"cuda" (record graphs), "eager" (the static path without graphs), "cpu" (decode steps of a model in
    weight blocks as one C++ call: backends/cpu/decode_stack.py) or "off", for an engine's settings.

    "auto" means CUDA graphs on a CUDA device with the triton backend, the CPU's decode stack with the cpu
    backend, on one rank, unless config.enforce_eager; "off" elsewhere. The tensor-parallel ranks (chapter 7) run eagerly.
    With LoRA adapters (chapter 11: each step's rows set on the host) only the CPU's decode stack runs, adding their deltas.
    """
    if requested not in ("auto", "off", "eager", "cuda", "cpu"):
        raise ValueError(f"decode_graphs must be auto, off, eager, cuda or cpu, got {requested!r}")
    if requested != "auto":
        return "off" if config.lora_adapters and requested != "cpu" else requested
    from miniyaie.backends.choose import resolve_backend_name

    if config.enforce_eager or config.tensor_parallel_size != 1:
        return "off"
    backend, kind = resolve_backend_name(config.attention_backend, device), torch.device(device).type
    if (kind, backend) == ("cpu", "cpu"):
        return "cpu"
    return "cuda" if (kind, backend) == ("cuda", "triton") and not config.lora_adapters else "off"


class _EagerReplay:
    """Stands in for a captured graph: each replay runs the step function again (same buffers, same sizes)."""

    def __init__(self, step):
        self.step = step
        self.output = step()

    def replay(self) -> None:
        self.output = self.step()


class _CudaGraphReplay:
    """A CUDA graph of the step function; `output` is the tensor the graph rewrites at every replay."""

    def __init__(self, step, pool):
        side = torch.cuda.Stream()  # warm up away from the default stream, as torch's docs ask
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # compiles Triton kernels, initialises cuBLAS handles
                step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.output = step()

    def replay(self) -> None:
        self.graph.replay()


class DecodeGraphRunner:
    """Runs the decode steps it accepts from static buffers, through one recorded graph per padded size.

    counters: replays (steps that ran here), padded_rows (rows added by padding),
    eager_steps (steps handed back to the caller: prefill, mixed, too big).
    """

    def __init__(self, model, pool, scratch_block: int, block_size: int, max_seq_len: int,
                 cap: int = DEFAULT_LADDER_CAP, replay: str = "cuda"):
        if replay not in ("cuda", "eager"):
            raise ValueError(f"replay must be 'cuda' or 'eager', got {replay!r}")
        self.model, self.pool, self.replay_kind = model, pool, replay
        self.device = model.lm_head.weight.device
        self.ladder = batch_ladder(cap)
        max_blocks = -(-max_seq_len // block_size)
        self.inputs = StaticDecodeInputs(self.ladder[-1], max_blocks, block_size, scratch_block, self.device)
        merge_projections(model)
        if not isinstance(model.ops, MergedProjectionOps):
            model.ops = MergedProjectionOps(model.ops)
        if not isinstance(model.backend, StaticDecodeBackend):
            model.backend = StaticDecodeBackend(model.backend)
        self.counters = dict(replays=0, padded_rows=0, eager_steps=0)
        self.graphs: dict[int, _EagerReplay | _CudaGraphReplay] = {}
        self.memory_bytes = 0
        self.capture_seconds = 0.0

    def capture(self) -> None:
        """Record one graph per ladder size, largest first (the smaller ones reuse its pool's memory)."""
        start = time.perf_counter()
        self.inputs.pad_all()
        before = torch.cuda.memory_reserved(self.device) if self.replay_kind == "cuda" else 0
        shared = torch.cuda.graph_pool_handle() if self.replay_kind == "cuda" else None
        for size in reversed(self.ladder):
            step = self._step_function(size)
            self.graphs[size] = _CudaGraphReplay(step, shared) if self.replay_kind == "cuda" else _EagerReplay(step)
        if self.replay_kind == "cuda":
            torch.cuda.synchronize(self.device)
            self.memory_bytes = torch.cuda.memory_reserved(self.device) - before
        self.capture_seconds = time.perf_counter() - start

    def _step_function(self, size: int):
        """The model body over the first `size` rows of the static buffers; the same tensors at every call."""
        num_kv_heads = self.model.config.num_kv_heads
        meta = self.inputs.metadata(size, static_num_splits(self.model.backend, size, num_kv_heads,
                                                            self.inputs.max_seq_len, self.device))
        ids, positions = self.inputs.input_ids[:size], self.inputs.positions[:size]
        return lambda: self.model(ids, positions, self.pool, meta)

    def run(self, input_ids: torch.Tensor, positions: torch.Tensor, meta) -> torch.Tensor | None:
        """Hidden states [n, hidden] of a decode step through its graph; None if this step must run eagerly."""
        size = padded_size(len(meta.query_lens), self.ladder) if self.inputs.accepts(meta, self.ladder) else None
        if size is None or size not in self.graphs:
            self.counters["eager_steps"] += 1
            return None
        rows = len(meta.query_lens)
        self.inputs.fill(input_ids, positions, meta, size)
        graph = self.graphs[size]
        graph.replay()
        self.counters["replays"] += 1
        self.counters["padded_rows"] += size - rows
        return graph.output[:rows]


def kv_budget_bytes(config, mode: str) -> int:
    """The KV pool's budget: with recorded graphs, GRAPH_MEMORY_RESERVE less (half the budget at most)."""
    reserve = GRAPH_MEMORY_RESERVE if mode == "cuda" else 0
    return max(config.kv_cache_bytes - reserve, config.kv_cache_bytes // 2)


def make_decode_graphs(mode: str, model, pool, scratch_block: int, config):
    """The engine's decode graphs, recorded now (None when mode is "off"; for "cpu" a CpuDecodeStack, or None
    where the model does not qualify); `scratch_block` is the pool's block past those the paged memory hands
    out. Contexts up to the model's or the pool's length replay."""
    if mode == "off":
        return None
    if mode == "cpu":
        from miniyaie.backends.cpu.decode_stack import make_decode_stack

        return make_decode_stack(model, pool)
    max_seq_len = min(model.config.max_position_embeddings, scratch_block * config.block_size)
    graphs = DecodeGraphRunner(model, pool, scratch_block, config.block_size, max_seq_len,
                               cap=min(config.max_num_seqs, DEFAULT_LADDER_CAP), replay="cuda" if mode == "cuda" else "eager")
    graphs.capture()
    return graphs
