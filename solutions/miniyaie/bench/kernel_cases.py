"""The cases of `miniyaie harness`: each chapter 4 kernel at realistic shapes, with its torch reference.

A Case runs the Triton kernel and its plain-torch reference on the same
inputs, and knows the bytes and FLOPs the kernel must at least move and do,
for the roofline. The reference is the definition, written for clarity (a
Python loop over rows, syncs included), so beating it proves little; each
case also carries the best plain-torch ways to do the same job, its
baselines: scaled_dot_product_attention with a causal flag that lets it use
its flash path (not a bool mask, which rules that out), chapter 5's batched
sampler and torch.multinomial.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

KERNELS = ("decode_attention", "extend_attention", "store_kv", "rms_norm", "rotary", "silu_and_mul", "sample")


@dataclass
class Baseline:
    """Another way to do a case's job, timed against the kernel on a GPU."""

    name: str
    run: Callable[[], object]
    # Its result in the kernel's layout, checked against the reference so that the
    # comparison is with the same computation; None when it cannot match token for
    # token (a sampler drawing its own random numbers).
    as_kernel_output: Callable[[object], object] | None = None


@dataclass
class Case:
    kernel: str
    shape: str
    run: Callable[[], object]  # the Triton kernel on fresh-enough inputs
    reference: Callable[[], object]
    compare: Callable[[object, object], float]  # max abs error; raises if beyond tolerance
    bytes: int  # bytes the kernel must move at least
    flops: int
    baselines: list[Baseline] = field(default_factory=list)
    result: dict = field(default_factory=dict)


# ---------------------------------------------------------------- inputs


def _pool(torch, lens, kv_heads, head_dim, page, dtype, device):
    pages = [-(-n // page) for n in lens]
    order = torch.randperm(sum(pages), device=device)
    tables = torch.zeros(len(lens), max(pages), dtype=torch.int32, device=device)
    used = 0
    for i, n in enumerate(pages):
        tables[i, :n] = order[used : used + n]
        used += n
    k = torch.randn(sum(pages) * page, kv_heads, head_dim, dtype=dtype, device=device)
    return k, torch.randn_like(k), tables


def _close(torch, atol, rtol):
    def compare(actual, expected):
        pairs = list(zip(actual, expected)) if isinstance(actual, tuple) else [(actual, expected)]
        err = 0.0
        for a, e in pairs:
            torch.testing.assert_close(a.float(), e.float(), atol=atol, rtol=rtol)
            err = max(err, float((a.float() - e.float()).abs().max()))
        return err

    return compare


def _dense_kv(torch, k, v, tables, lens, page):
    """The pool's K/V gathered into dense [batch, kv_heads, len, dim] (all sequences one length) for SDPA."""
    n = lens[0]
    pos = torch.arange(n, device=k.device)
    slots = tables[:, pos // page].long() * page + pos % page  # [batch, n]
    return k[slots].transpose(1, 2).contiguous(), v[slots].transpose(1, 2).contiguous()


def build_cases(torch, K, on_gpu: bool, names) -> list[Case]:
    from torch.nn.attention.bias import causal_lower_right

    from miniyaie.engine.sampling_stages import draw, filter_logits

    sdpa_fn = torch.nn.functional.scaled_dot_product_attention
    device, dtype = ("cuda" if on_gpu else "cpu"), torch.bfloat16
    size = dtype.itemsize
    attn_close, elem_close = _close(torch, 2e-2, 2e-2), _close(torch, 2e-2, 1.6e-2)
    heads, kv_heads, dim = (32, 4, 128) if on_gpu else (8, 1, 128)  # GQA 8:1
    cases: list[Case] = []
    torch.manual_seed(0)

    decode_shapes = [(1, 32768), (32, 4096), (64, 8192), (128, 4096), (128, 512)] if on_gpu else [(2, 40), (3, 17)]
    for batch, ctx in decode_shapes:
        for page in (1, 16):
            lens = [ctx] * batch
            k, v, tables = _pool(torch, lens, kv_heads, dim, page, dtype, device)
            q = torch.randn(batch, heads, dim, dtype=dtype, device=device)
            seq_lens = torch.tensor(lens, dtype=torch.int32, device=device)
            args = (q, k, v, tables, seq_lens, page, dim**-0.5)
            dk, dv = _dense_kv(torch, k, v, tables, lens, page)  # SDPA gets K/V already gathered: its best case
            sdpa = Baseline("sdpa", lambda q4=q[:, :, None, :], dk=dk, dv=dv: sdpa_fn(q4, dk, dv, scale=dim**-0.5, enable_gqa=True),
                            lambda out: out[:, :, 0, :])
            cases.append(Case(
                "decode_attention", f"batch {batch}, context {ctx}, page {page}",
                lambda args=args: K.decode_attention(*args), lambda args=args: K.decode_attention_reference(*args),
                attn_close, bytes=2 * batch * ctx * kv_heads * dim * size + 2 * q.numel() * size,
                flops=4 * batch * ctx * heads * dim, baselines=[sdpa],
            ))

    extend_shapes = [(4, 0, 2048), (4, 4096, 512), (16, 0, 1024)] if on_gpu else [(2, 0, 24), (2, 17, 9)]
    for batch, prefix, new in extend_shapes:
        page = 16
        lens = [prefix + new] * batch
        k, v, tables = _pool(torch, lens, kv_heads, dim, page, dtype, device)
        q = torch.randn(batch * new, heads, dim, dtype=dtype, device=device)
        start = torch.arange(0, batch * new + 1, new, dtype=torch.int32, device=device)
        args = (q, k, v, tables, start, torch.tensor(lens, dtype=torch.int32, device=device), page, dim**-0.5)
        visible = batch * (new * prefix + new * (new + 1) // 2)  # unmasked (query, key) pairs
        dk, dv = _dense_kv(torch, k, v, tables, lens, page)
        q4 = q.view(batch, new, heads, dim).transpose(1, 2)
        # The causal mask as a flag, never a bool tensor (which rules out SDPA's flash path). With a cached
        # prefix the queries are the last `new` rows of the square: causal from the lower right corner.
        causal = {"is_causal": True} if prefix == 0 else {"attn_mask": causal_lower_right(new, prefix + new)}
        sdpa = Baseline("sdpa", lambda q4=q4, dk=dk, dv=dv, causal=causal: sdpa_fn(
            q4, dk, dv, scale=dim**-0.5, enable_gqa=True, **causal),
            lambda out, batch=batch, new=new: out.transpose(1, 2).reshape(batch * new, heads, dim))
        cases.append(Case(
            "extend_attention", f"batch {batch}, prefix {prefix}, new {new}",
            lambda args=args: K.extend_attention(*args), lambda args=args: K.extend_attention_reference(*args),
            attn_close, bytes=(2 * k.numel() + 2 * q.numel()) * size, flops=4 * visible * heads * dim, baselines=[sdpa],
        ))

    tokens, hidden, inter = (8192, 4096, 14336) if on_gpu else (6, 96, 160)
    slots_total = tokens * 2
    kk = torch.randn(tokens, kv_heads * 2, dim, dtype=dtype, device=device)
    vv = torch.randn_like(kk)
    k_cache = torch.zeros(slots_total, kv_heads * 2, dim, dtype=dtype, device=device)
    v_cache, k_ref, v_ref = torch.zeros_like(k_cache), torch.zeros_like(k_cache), torch.zeros_like(k_cache)
    slots = torch.randperm(slots_total, device=device)[:tokens]

    def store_run():
        K.store_kv(kk, vv, k_cache, v_cache, slots)
        return k_cache, v_cache

    def store_ref():
        K.store_kv_reference(kk, vv, k_ref, v_ref, slots)
        return k_ref, v_ref

    cases.append(Case("store_kv", f"{tokens} tokens x {kv_heads * 2} kv heads x {dim}", store_run, store_ref,
                      elem_close, bytes=4 * kk.numel() * size, flops=0))

    x = torch.randn(tokens, hidden, dtype=dtype, device=device)
    r, w = torch.randn_like(x), torch.randn(hidden, dtype=dtype, device=device)
    cases.append(Case("rms_norm", f"{tokens} x {hidden}, fused residual add",
                      lambda: K.rms_norm(x, w, 1e-6, r), lambda: K.rms_norm_reference(x, w, 1e-6, r),
                      elem_close, bytes=4 * x.numel() * size + w.numel() * size, flops=0))

    q = torch.randn(tokens, heads, dim, dtype=dtype, device=device)
    kr = torch.randn(tokens, kv_heads, dim, dtype=dtype, device=device)
    angles = torch.rand(tokens, dim // 2, device=device) * 100
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    q_ref, k_ref2 = q.clone(), kr.clone()

    def rope_run():
        q2, k2 = q.clone(), kr.clone()  # in place: keep the inputs for the next call
        K.rotary(q2, k2, cos, sin)
        return q2, k2

    def rope_ref():
        q2, k2 = q_ref.clone(), k_ref2.clone()
        K.rotary_reference(q2, k2, cos, sin)
        return q2, k2

    def rope_timed():  # what do_bench times: the kernel alone, in place
        K.rotary(q, kr, cos, sin)

    rope = Case("rotary", f"{tokens} tokens, {heads}+{kv_heads} heads x {dim}", rope_run, rope_ref, elem_close,
                bytes=2 * (q.numel() + kr.numel()) * size + 2 * tokens * dim * 4, flops=0)
    rope.timed = rope_timed
    cases.append(rope)

    gate = torch.randn(tokens, inter, dtype=dtype, device=device)
    up = torch.randn_like(gate)
    cases.append(Case("silu_and_mul", f"{tokens} x {inter}", lambda: K.silu_and_mul(gate, up),
                      lambda: K.silu_and_mul_reference(gate, up), elem_close, bytes=3 * gate.numel() * size, flops=0))

    rows, vocab = (128, 151936) if on_gpu else (4, 4096)
    logits = torch.randn(rows, vocab, device=device) * 4
    params = (torch.full((rows,), 0.8, device=device), torch.full((rows,), 50, device=device, dtype=torch.int64),
              torch.full((rows,), 0.9, device=device), torch.zeros(rows, device=device), torch.rand(rows, device=device))

    def same_tokens(actual, expected):
        if not torch.equal(actual.cpu(), expected.cpu()):
            raise AssertionError(f"sampled {actual.tolist()} but the reference picked {expected.tolist()}")
        return 0.0

    temperature, top_k, top_p, min_p, _ = params
    no_seeds = [None] * rows

    def batched_sampler():  # chapter 5's Sampler on the same rows: one sort (topk here), one cumsum, one draw
        return draw(torch.softmax(filter_logits(logits / temperature[:, None], top_k, top_p, min_p), dim=-1), no_seeds)

    kept_probs = torch.softmax(filter_logits(logits / temperature[:, None], top_k, top_p, min_p), dim=-1)
    cases.append(Case("sample", f"{rows} rows x vocab {vocab}, top-k 50, top-p 0.9",
                      lambda: K.sample(logits, *params), lambda: K.sample_reference(logits, *params),
                      same_tokens, bytes=logits.numel() * 4, flops=0,
                      baselines=[Baseline("ch5 sampler", batched_sampler),
                                 # the draw alone, from probabilities already filtered: a floor for any sampler
                                 Baseline("multinomial", lambda: torch.multinomial(kept_probs, 1))]))
    return [c for c in cases if not names or c.kernel in names]
