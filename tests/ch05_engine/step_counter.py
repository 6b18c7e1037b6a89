"""Count what one real forward step touches: parameter bytes, K/V bytes and matmul FLOPs (for Task 5.16's tests).

A tiny CausalLM runs one packed step over a paged KV cache (random block
tables, the reference attention backend) under two dispatch-level
observers: torch's FlopCounterMode (matmul FLOPs) and ours, which sees
every aten op's tensors and records which parameter storages an op reads
(all of it, or, for an embedding lookup, the rows it gathers) and how many
K/V rows are gathered from the cache or scattered into it. Nothing here
knows the formula the tests check.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import transformers
from tiny_models import COMMON, CONFIGS
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from miniyaie.model import AttentionMetadata, CausalLM, KVCache, ModelConfig, TorchAttentionBackend


@dataclass
class Counted:
    weight_bytes: int
    kv_read_bytes: int
    kv_write_bytes: int
    flops: int


def tiny_config(kind: str, **overrides) -> ModelConfig:
    """The ModelConfig of tests/ch00_model/tiny_models.py's `kind`, read through the real from_hf."""
    config_cls, _, extra = CONFIGS[kind]
    return ModelConfig.from_hf(getattr(transformers, config_cls)(**{**COMMON, **extra, **overrides}))


def tiny_model(config: ModelConfig, dtype: torch.dtype) -> CausalLM:
    torch.manual_seed(0)
    return CausalLM(config, TorchAttentionBackend()).to(dtype).eval()


class _Touches(TorchDispatchMode):
    def __init__(self, params: list[torch.Tensor], kv: list[torch.Tensor]):
        super().__init__()
        self.params = {p.untyped_storage().data_ptr(): p.nbytes for p in params}
        self.kv = {t.untyped_storage().data_ptr() for t in kv}
        self.whole: set[int] = set()  # parameter storages some op read whole
        self.rows: dict[int, int] = {}  # parameter storage -> bytes of the rows embedding lookups gathered
        self.kv_read = self.kv_write = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if not func.is_view:  # a view (a transpose, a layer's slice of the cache) moves no data
            first = args[0] if args and isinstance(args[0], torch.Tensor) else None
            if name == "embedding":
                weight, indices = args[0], args[1]
                ptr = weight.untyped_storage().data_ptr()
                self.rows[ptr] = self.rows.get(ptr, 0) + indices.numel() * weight[0].nbytes
            elif first is not None and first.untyped_storage().data_ptr() in self.kv and name in ("index", "index_put_", "index_put"):
                row_bytes = first[0].nbytes  # one slot: [num_kv_heads, head_dim]
                moved = args[1][0].numel() * row_bytes
                if name == "index":
                    self.kv_read += moved
                else:
                    self.kv_write += moved
            else:
                for arg in [*args, *kwargs.values()]:
                    for t in arg if isinstance(arg, (list, tuple)) else [arg]:
                        if isinstance(t, torch.Tensor):
                            ptr = t.untyped_storage().data_ptr()
                            if ptr in self.kv:
                                raise AssertionError(f"the KV cache is touched by {func}, which this counter does not know")
                            if ptr in self.params:
                                self.whole.add(ptr)
        return func(*args, **kwargs)

    @property
    def weight_bytes(self) -> int:
        return sum(self.params[p] for p in self.whole) + sum(b for p, b in self.rows.items() if p not in self.whole)


def _paged_step(config: ModelConfig, seqs, block_size: int, rng: random.Random):
    """Block tables, slot mapping, token ids and positions of a step over randomly placed blocks."""
    lengths = [s.context + s.new_tokens for s in seqs]
    need = [-(-n // block_size) for n in lengths]
    blocks = list(range(sum(need) + 2))
    rng.shuffle(blocks)
    tables, slots, width = [], [], max(need)
    for seq, count in zip(seqs, need):
        table, blocks = blocks[:count], blocks[count:]
        tables.append(table + [0] * (width - count))
        slots += [table[p // block_size] * block_size + p % block_size for p in range(seq.context, seq.context + seq.new_tokens)]
    meta = AttentionMetadata([s.new_tokens for s in seqs], lengths, torch.tensor(slots), torch.tensor(tables), block_size)
    ids = torch.tensor([rng.randrange(config.vocab_size) for _ in slots])
    positions = torch.tensor([p for s in seqs for p in range(s.context, s.context + s.new_tokens)])
    return meta, ids, positions, (sum(need) + 2) * block_size


def count_step(model: CausalLM, seqs, kv_dtype: torch.dtype, block_size: int = 4, seed: int = 0) -> Counted:
    """Run one step of `seqs` (SeqStep-like: new_tokens, context, samples) and count what it touched.

    The LM head runs on the last row of each sequence that samples, as the engine's runner does.
    """
    meta, ids, positions, num_slots = _paged_step(model.config, seqs, block_size, random.Random(seed))
    cache = KVCache(model.config, num_slots, kv_dtype)
    ends = torch.tensor(meta.query_lens).cumsum(0) - 1
    sampling = ends[[i for i, s in enumerate(seqs) if s.samples]]
    touches = _Touches(list(model.parameters()), [cache.k, cache.v])
    with FlopCounterMode(display=False) as flops, touches:
        hidden = model(ids, positions, cache, meta)
        if len(sampling):
            model.compute_logits(hidden[sampling])
    return Counted(touches.weight_bytes, touches.kv_read, touches.kv_write, flops.get_total_flops())
