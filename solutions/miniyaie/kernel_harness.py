"""`miniyaie harness`: check chapter 4's kernels at realistic shapes, then time them on a GPU.

For each case: correctness against the torch reference first; then, on a
GPU only, the median time (triton.testing.do_bench), the achieved GB/s or
TFLOP/s, that as a share of a device-to-device copy measured in the same
run, and the speedup over the torch reference (and over
scaled_dot_product_attention for attention). Without a GPU the same code runs
interpreter-sized shapes and reports correctness only: the interpreter's
speed says nothing about a GPU's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

KERNELS = ("decode_attention", "extend_attention", "store_kv", "rms_norm", "rotary", "silu_and_mul", "sample")
H100_BF16_DENSE_TFLOPS = 989.0  # the extend target is a share of this peak


def add_parser(sub) -> None:
    p = sub.add_parser("harness", help="check (and on a GPU, time) the chapter 4 kernels")
    p.add_argument("--impl", default=None, help="which tree's kernels: solutions (default), chapters, or a mix")
    p.add_argument("--kernel", choices=KERNELS, action="append", help="only this kernel (repeatable)")
    p.add_argument("--json", default=None, metavar="OUT", help="write the results as JSON")
    p.add_argument("--plot", default=None, metavar="OUT.png", help="draw the roofline of the results")


@dataclass
class Case:
    kernel: str
    shape: str
    run: Callable[[], object]  # the Triton kernel on fresh-enough inputs
    reference: Callable[[], object]
    compare: Callable[[object, object], float]  # max abs error; raises if beyond tolerance
    bytes: int  # bytes the kernel must move at least
    flops: int
    sdpa: Callable[[], object] | None = None
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
            sdpa = None
            if on_gpu:
                dk, dv = _dense_kv(torch, k, v, tables, lens, page)
                q4 = q[:, :, None, :]
                sdpa = lambda q4=q4, dk=dk, dv=dv: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731
                    q4, dk, dv, scale=dim**-0.5, enable_gqa=True)
            cases.append(Case(
                "decode_attention", f"batch {batch}, context {ctx}, page {page}",
                lambda args=args: K.decode_attention(*args), lambda args=args: K.decode_attention_reference(*args),
                attn_close, bytes=2 * batch * ctx * kv_heads * dim * size + 2 * q.numel() * size,
                flops=4 * batch * ctx * heads * dim, sdpa=sdpa,
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
        sdpa = None
        if on_gpu:
            dk, dv = _dense_kv(torch, k, v, tables, lens, page)
            q4 = q.view(batch, new, heads, dim).transpose(1, 2)
            mask = torch.ones(new, prefix + new, dtype=torch.bool, device=device).tril(prefix)
            sdpa = lambda q4=q4, dk=dk, dv=dv, mask=mask: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731
                q4, dk, dv, attn_mask=mask, scale=dim**-0.5, enable_gqa=True)
        cases.append(Case(
            "extend_attention", f"batch {batch}, prefix {prefix}, new {new}",
            lambda args=args: K.extend_attention(*args), lambda args=args: K.extend_attention_reference(*args),
            attn_close, bytes=(2 * k.numel() + 2 * q.numel()) * size, flops=4 * visible * heads * dim, sdpa=sdpa,
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

    cases.append(Case("sample", f"{rows} rows x vocab {vocab}, top-k 50, top-p 0.9",
                      lambda: K.sample(logits, *params), lambda: K.sample_reference(logits, *params),
                      same_tokens, bytes=logits.numel() * 4, flops=0))
    return [c for c in cases if not names or c.kernel in names]


# ---------------------------------------------------------------- running


def copy_bandwidth_gbs(torch, bench) -> float:
    """Device-to-device copy of 1 GiB: read + write bytes per second."""
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src))
    return 2 * src.numel() / ms / 1e6


def run_case(case: Case, on_gpu: bool, bench, copy_gbs: float | None, torch) -> dict:
    row = {"kernel": case.kernel, "shape": case.shape, "bytes": case.bytes, "flops": case.flops,
           "intensity_flop_per_byte": case.flops / case.bytes if case.bytes else 0.0}
    try:
        row["max_abs_error"] = case.compare(case.run(), case.reference())
        row["correct"] = True
    except Exception as exc:  # a wrong kernel is a result to report, not a crash of the harness
        row["correct"], row["error"] = False, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
        return row
    if on_gpu:
        ms = bench(getattr(case, "timed", case.run))
        row["ms"] = ms
        row["gb_per_s"] = case.bytes / ms / 1e6
        row["pct_of_copy"] = 100 * row["gb_per_s"] / copy_gbs
        if case.flops:
            row["tflop_per_s"] = case.flops / ms / 1e9
            row["pct_of_bf16_peak"] = 100 * row["tflop_per_s"] / H100_BF16_DENSE_TFLOPS
        row["speedup_vs_reference"] = bench(case.reference) / ms
        if case.sdpa is not None:
            row["speedup_vs_sdpa"] = bench(case.sdpa) / ms
    return row


def format_table(rows: list[dict], on_gpu: bool) -> str:
    def fmt(row, key, spec):
        return format(row[key], spec) if key in row else "-"

    header = f"{'kernel':18} {'shape':44} {'ok':4}"
    if on_gpu:
        header += f" {'ms':>9} {'GB/s':>8} {'%copy':>6} {'TFLOP/s':>8} {'x ref':>7} {'x sdpa':>7}"
    lines = [header, "-" * len(header)]
    for row in rows:
        line = f"{row['kernel']:18} {row['shape'][:44]:44} {'yes' if row['correct'] else 'NO':4}"
        if on_gpu and row["correct"]:
            line += (f" {fmt(row, 'ms', '9.4f')} {fmt(row, 'gb_per_s', '8.0f')} {fmt(row, 'pct_of_copy', '6.1f')}"
                     f" {fmt(row, 'tflop_per_s', '8.1f')} {fmt(row, 'speedup_vs_reference', '7.1f')}"
                     f" {fmt(row, 'speedup_vs_sdpa', '7.2f')}")
        if not row["correct"]:
            line += f"  {row['error']}"
        lines.append(line)
    return "\n".join(lines)


def plot_roofline(report: dict, path: str) -> None:
    """Achieved TFLOP/s against arithmetic intensity under the copy-bandwidth and bf16 roofs (GPU);
    without timings, the cases' intensities against an H100's nominal roofs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timed = report["timed"]
    bw = report["copy_bandwidth_gb_per_s"] if timed else 3350.0  # H100 SXM nominal HBM3
    fig, ax = plt.subplots(figsize=(8, 5))
    ai = [10 ** (i / 10) for i in range(-20, 41)]
    ax.plot(ai, [min(a * bw / 1e3, H100_BF16_DENSE_TFLOPS) for a in ai], "k-",
            label=f"roof: {'measured copy' if timed else 'nominal H100'} {bw:.0f} GB/s, {H100_BF16_DENSE_TFLOPS:.0f} TFLOP/s bf16")
    for kernel in dict.fromkeys(r["kernel"] for r in report["results"]):
        rows = [r for r in report["results"] if r["kernel"] == kernel and r.get("flops")]
        if not rows:
            continue
        xs = [r["intensity_flop_per_byte"] for r in rows]
        ys = [r["tflop_per_s"] if timed else min(x * bw / 1e3, H100_BF16_DENSE_TFLOPS) for r, x in zip(rows, xs)]
        ax.scatter(xs, ys, label=kernel + ("" if timed else " (placed on the roof: not timed)"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    ax.set_ylabel("TFLOP/s")
    where = report["device"] if timed else "CPU interpreter run, interpreter-sized shapes: no timings"
    ax.set_title(f"Chapter 4 attention kernels on the roofline\n({where})", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(args) -> int:
    from miniyaie import _switch

    if args.impl:
        _switch.select(args.impl)
    import torch

    from miniyaie.engine.backends import prepare_backend

    on_gpu = torch.cuda.is_available()
    prepare_backend("triton", "cuda" if on_gpu else "cpu")
    import miniyaie.kernels as K
    from miniyaie.kernels._triton import interpreting, triton

    if on_gpu and interpreting():
        on_gpu = False  # TRITON_INTERPRET=1 on a GPU machine: kernels run on the CPU interpreter
    bench = (lambda fn: triton.testing.do_bench(fn, return_mode="median")) if on_gpu else None
    copy_gbs = copy_bandwidth_gbs(torch, bench) if on_gpu else None
    device = torch.cuda.get_device_name() if on_gpu else f"CPU ({platform.processor() or platform.machine()}), Triton interpreter"
    print(f"miniyaie harness: {device}; kernels from {_switch.selected_root('kernels')}")
    if not on_gpu:
        print("No GPU: interpreter-sized shapes, correctness only (no timings are taken).")
    else:
        print(f"device-to-device copy: {copy_gbs:.0f} GB/s")
    rows = []
    for case in build_cases(torch, K, on_gpu, args.kernel):
        rows.append(run_case(case, on_gpu, bench, copy_gbs, torch))
        print(format_table(rows[-1:], on_gpu).splitlines()[-1], flush=True)
    print()
    print(format_table(rows, on_gpu))
    report = {
        "device": device, "timed": on_gpu, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["miniyaie", *sys.argv[1:]]), "torch": torch.__version__, "triton": triton.__version__,
        "copy_bandwidth_gb_per_s": copy_gbs, "bf16_peak_tflop_per_s": H100_BF16_DENSE_TFLOPS, "results": rows,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=lambda x: None if isinstance(x, float) and math.isnan(x) else x)
        print(f"wrote {args.json}")
    if args.plot:
        plot_roofline(report, args.plot)
        print(f"wrote {args.plot}")
    failed = [r for r in rows if not r["correct"]]
    if failed:
        print(f"{len(failed)} of {len(rows)} cases are wrong.")
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="miniyaie")
    add_parser(parser.add_subparsers(dest="command", required=True))
    sys.exit(main(parser.parse_args()))
