"""Decode steps of a model in weight blocks as one C++ call over all its layers: the CPU's decode graphs.

Why: with its weights in blocks (chapter 10) a one-request decode step of SmolLM2 spent as much time in
Python between its kernels as in the kernels (2-core Xeon, 2026-11-29: about 13 ms a token of module
calls, checks and new tensors around some 450 kernel calls). On a GPU, CUDA graphs take that away
(backends/cuda_graphs.py); here decode_stack.cpp runs the very kernels the layers call, in the same
order, from one loop. What stays in Python is once per step: the embedding, the rotation's angles, the
attention's row groups (the backend's, so its counters still count), and the final norm.

It takes a step only when it computes what the layers would: every row a decode, at most the linears'
`kernel_max_rows` of them (above, they dequantize and use the float32 matmul), a model whose modules it
recognised when the engine started (Llama-style layers, q/k/v and gate/up merged over blocks, the cpu
backend's kernels, no q/k norms), whose backend and layer ops are still those, and whose layers and weights
are still the objects its table points into. LoRA (chapter 11) wraps the projections and the layer ops: the
stack then takes the steps only once it is handed the adapters (`serve_lora`, decode_stack_lora.py) and adds
each linear's deltas itself. Results equal the layers' up to the SiLU of a one-row step (torch's there, the
C++ loop's here); tests/backends/test_decode_stack.py holds it to the layers' tokens and K/V, with and
without adapters.
"""

from __future__ import annotations

import torch

from miniyaie.backends.cpu import decode_stack_lora, lora_delta
from miniyaie.backends.cpu import kernels as cpu_kernels
from miniyaie.backends.cpu.layer_ops import CpuLayerOps
from miniyaie.backends.cpu.paged_attention import PagedCpuAttentionBackend
from miniyaie.model.layers import rope_cos_sin


def _fields(linear) -> list[int] | None:
    """A linear's part of a layer's row in the table, from its `kernel_fields` (quant/linear.py), or None."""
    fields = getattr(linear, "kernel_fields", None)
    return fields() if callable(fields) else None


def _merged(projection):
    """The one linear that q/k/v (or gate/up) run as when merged over blocks (quant/linear.py MergedBlocks)."""
    return getattr(getattr(projection, "merged", None), "linear", None)


def why_not(model, pool) -> str | None:
    """Why this model cannot run its decode steps as one call, or None if it can."""
    config, library = model.config, cpu_kernels.load()
    if library is None:
        return "the CPU kernels are not built"
    if type(model.backend) is not PagedCpuAttentionBackend or type(model.ops) is not CpuLayerOps:
        return "the model does not run on the cpu backend's kernels"
    if config.qk_norm or pool.k.dtype not in cpu_kernels.CACHE_TYPES or not pool.k.is_contiguous():
        return "q/k norms, or a K/V cache the kernels do not read"
    for layer in model.model.layers:
        attention, mlp = layer.self_attn, layer.mlp
        qkv, gate_up = _fields(_merged(attention.q_proj)), _fields(_merged(mlp.gate_proj))
        if qkv is None or gate_up is None or qkv[4] != (config.num_heads + 2 * config.num_kv_heads) * config.head_dim:
            return "q/k/v or gate/up not merged over weight blocks"
        if len(set(mlp.gate_proj.merged.sizes)) != 1:  # the C++ loop multiplies the first half by the second
            return "gate and up of different widths"
        if _fields(attention.o_proj) is None or _fields(mlp.down_proj) is None:
            return "an o or down projection not over weight blocks"
        if {layer.input_layernorm.eps, layer.post_attention_layernorm.eps} != {config.rms_norm_eps}:
            return "a norm whose eps is not the model's"
    return None


def _itself(projection):
    return projection


def _parts(layer, base=_itself) -> list:
    """The objects a layer's row of the table points into (through `base`, the module a wrapped projection runs)
    and the projections as the model holds them: if one is replaced, the row is stale."""
    attention, mlp = layer.self_attn, layer.mlp
    projections = [attention.q_proj, attention.o_proj, mlp.gate_proj, mlp.down_proj]
    q, o, gate, down = map(base, projections)
    linears = [_merged(q), o, _merged(gate), down]
    return [layer.input_layernorm.weight, layer.post_attention_layernorm.weight, *projections, *linears,
            *(getattr(linear, "qweight", None) for linear in linears), *(getattr(linear, "bias", None) for linear in linears)]


class CpuDecodeStack:
    """Runs the decode steps it accepts in decode_stack.cpp; `counters`: steps (run here), rows, handed_back, and
    lora_steps, lora_rows (steps run here with rows of adapters, and those rows)."""

    def __init__(self, model, pool):
        self.model, self.pool = model, pool
        self.backend, self.ops, self.library = model.backend, model.ops, cpu_kernels.load()
        rows = []
        for index, layer in enumerate(model.model.layers):
            k_cache, v_cache = pool.layer(index)
            rows.append([layer.input_layernorm.weight.data_ptr(), layer.post_attention_layernorm.weight.data_ptr(),
                         *_fields(_merged(layer.self_attn.q_proj)), *_fields(layer.self_attn.o_proj),
                         *_fields(_merged(layer.mlp.gate_proj)), *_fields(layer.mlp.down_proj),
                         k_cache.data_ptr(), v_cache.data_ptr()])
        self.table = torch.tensor(rows, dtype=torch.int64)
        if self.table.shape[1] != self.library.decode_stack_fields():
            raise RuntimeError(f"decode_stack.cpp reads {self.library.decode_stack_fields()} fields a layer, "
                               f"the table has {self.table.shape[1]}")
        self.max_rows = min(linear.kernel_max_rows for layer in model.model.layers
                            for linear in (_merged(layer.self_attn.q_proj), layer.self_attn.o_proj,
                                           _merged(layer.mlp.gate_proj), layer.mlp.down_proj))
        self.parts = [_parts(layer) for layer in model.model.layers]  # also keeps every tensor of the table alive
        self.counters = dict(steps=0, rows=0, handed_back=0, lora_steps=0, lora_rows=0)
        self.lora: decode_stack_lora.StackLoRA | None = None
        self.lora_table: torch.Tensor | None = None

    def serve_lora(self, lora: decode_stack_lora.StackLoRA) -> str | None:
        """Take the steps of the model as `lora` wraps it, adding its deltas; None, or why not (the layers then
        run every step: the model's projections and ops are no longer the ones the stack knows)."""
        layer = self.model.model.layers[0]
        linears = [lora.base(p) for p in (layer.self_attn.q_proj, layer.self_attn.o_proj, layer.mlp.gate_proj,
                                          layer.mlp.down_proj)]
        merged = [_merged(linears[0]), linears[1], _merged(linears[2]), linears[3]]
        widths = [(linear.in_features, linear.out_features) for linear in merged if linear is not None]
        why = "the wrapped projections are not the stack's" if len(widths) != 4 else decode_stack_lora.why_not(
            lora, widths, len(self.model.model.layers))
        if why is not None:
            return why
        lora_table = decode_stack_lora.table(lora)
        if lora_table.shape[1] != self.library.decode_stack_lora_fields():
            return f"decode_stack.cpp reads {self.library.decode_stack_lora_fields()} LoRA fields a layer, not {lora_table.shape[1]}"
        self.lora, self.lora_table = lora, lora_table
        self.parts = [_parts(layer, lora.base) for layer in self.model.model.layers]
        return None

    def unchanged(self) -> bool:
        """Every module and tensor the table points into is still the model's (a swapped layer or weight: no)."""
        base = self.lora.base if self.lora is not None else _itself
        return all(now is then for layer, parts in zip(self.model.model.layers, self.parts)
                   for now, then in zip(_parts(layer, base), parts))

    def accepts(self, input_ids: torch.Tensor, meta) -> bool:
        ops = self.ops if self.lora is None else self.lora.ops
        return (input_ids.device.type == "cpu" and 0 < len(meta.query_lens) <= self.max_rows
                and all(n == 1 for n in meta.query_lens) and self.model.backend is self.backend and self.model.ops is ops
                and (self.lora is None or lora_delta.enabled()) and self.unchanged())

    def run(self, input_ids: torch.Tensor, positions: torch.Tensor, meta) -> torch.Tensor | None:
        """Hidden states [rows, hidden] of a decode step, final norm applied; None if the layers must run it."""
        if not self.accepts(input_ids, meta):
            self.counters["handed_back"] += 1
            return None
        model, config = self.model, self.model.config
        if model.inv_freq.device != positions.device:
            model.inv_freq = model.inv_freq.to(positions.device)
        cos, sin = (t.contiguous() for t in rope_cos_sin(config, positions, model.inv_freq))  # kept alive for the call
        x = model.model.embed_tokens(input_ids).contiguous()
        decode = self.backend.decode_rows(meta)
        slots = meta.slot_mapping.to(torch.int64).contiguous()
        rows, hidden = x.shape
        segments = self.lora.segments(rows) if self.lora is not None else None
        lora, kept = (None, ()) if segments is None else decode_stack_lora.step_fields(self.lora, self.lora_table, segments)
        self.library.decode_stack(
            x.data_ptr(), rows, hidden, self.table.data_ptr(), self.table.shape[0], config.rms_norm_eps,
            cos.data_ptr(), sin.data_ptr(), slots.data_ptr(), config.num_heads,
            config.num_kv_heads, config.head_dim, decode.block_tables.data_ptr(), decode.block_tables.shape[1],
            decode.rows.data_ptr(), decode.seq_lens.data_ptr(), decode.group_starts.data_ptr(),
            decode.group_starts.numel() - 1, meta.block_size, model.model.layers[0].self_attn.scale,
            cpu_kernels.CACHE_TYPES[self.pool.k.dtype], torch.get_num_threads(), 0 if lora is None else lora.data_ptr())
        self.counters["steps"] += 1
        self.counters["rows"] += rows
        if lora is not None:
            self.counters["lora_steps"] += 1
            self.counters["lora_rows"] += int(kept[2].sum())
        return self.ops.rms_norm(x, model.model.norm.weight, model.model.norm.eps)[0]


def make_decode_stack(model, pool) -> CpuDecodeStack | None:
    """The model's decode stack, or None where why_not gives a reason (its steps then run layer by layer)."""
    return None if why_not(model, pool) is not None else CpuDecodeStack(model, pool)
