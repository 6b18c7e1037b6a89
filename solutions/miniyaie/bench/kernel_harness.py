"""`miniyaie harness`: check chapter 4's kernels at realistic shapes, then time them on a GPU.

For each case: correctness against the torch reference first; then, on a
GPU only, the median time (triton.testing.do_bench), the achieved GB/s or
TFLOP/s, that as a share of a device-to-device copy measured in the same
run, and the speedup over the torch reference and over each baseline (the
best plain-torch way to do the same job: see kernel_cases.py). Every
baseline that can is first checked against the reference, so that the
comparison is with the same computation. Without a GPU the same code runs
interpreter-sized shapes and reports correctness only: the interpreter's
speed says nothing about a GPU's.
"""

from __future__ import annotations

import datetime
import json
import math
import platform
import sys

from miniyaie.bench.kernel_cases import Case, build_cases

H100_BF16_DENSE_TFLOPS = 989.0  # the extend target is a share of this peak


# ---------------------------------------------------------------- running


def copy_bandwidth_gbs(torch, bench) -> float:
    """Device-to-device copy of 1 GiB: read + write bytes per second."""
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src))
    return 2 * src.numel() / ms / 1e6


def describe_failure(exc: Exception) -> str:
    """One line for the table. A task's stub raises NotImplementedError: the interpreter runs that raise,
    while a GPU's compiler refuses it (UnsupportedLanguageConstruct), so say which it is either way."""
    text = str(exc).strip()
    line = f"{type(exc).__name__}: {text.splitlines()[0][:200] if text else ''}"
    if "NotImplementedError" in text and not line.startswith("NotImplementedError"):
        line += " (the kernel still raises NotImplementedError: the task's stub)"
    return line


def run_case(case: Case, on_gpu: bool, bench, copy_gbs: float | None, torch) -> dict:
    row = {"kernel": case.kernel, "shape": case.shape, "bytes": case.bytes, "flops": case.flops,
           "intensity_flop_per_byte": case.flops / case.bytes if case.bytes else 0.0}
    try:
        expected = case.reference()
        row["max_abs_error"] = case.compare(case.run(), expected)
        row["correct"] = True
    except Exception as exc:  # a wrong kernel is a result to report, not a crash of the harness
        row["correct"], row["error"] = False, describe_failure(exc)
        return row
    for baseline in case.baselines:
        if baseline.as_kernel_output is None:
            continue
        try:  # a baseline computing something else would make a false comparison: a harness bug, reported as one
            case.compare(baseline.as_kernel_output(baseline.run()), expected)
        except Exception as exc:
            row["correct"] = False
            row["error"] = f"baseline {baseline.name} differs from the reference: {str(exc).strip().splitlines()[0][:160]}"
            return row
    row["baselines_checked"] = [b.name for b in case.baselines if b.as_kernel_output is not None]
    if on_gpu:
        ms = bench(getattr(case, "timed", case.run))
        row["ms"] = ms
        row["gb_per_s"] = case.bytes / ms / 1e6
        row["pct_of_copy"] = 100 * row["gb_per_s"] / copy_gbs
        if case.flops:
            row["tflop_per_s"] = case.flops / ms / 1e9
            row["pct_of_bf16_peak"] = 100 * row["tflop_per_s"] / H100_BF16_DENSE_TFLOPS
        row["speedup_vs_reference"] = bench(case.reference) / ms
        row["speedup_vs"] = {b.name: bench(b.run) / ms for b in case.baselines}
    return row


def format_table(rows: list[dict], on_gpu: bool) -> str:
    def fmt(row, key, spec):
        return format(row[key], spec) if key in row else "-"

    header = f"{'kernel':18} {'shape':44} {'ok':4}"
    if on_gpu:
        header += f" {'ms':>9} {'GB/s':>8} {'%copy':>6} {'TFLOP/s':>8} {'x ref':>7}  speedup over each baseline"
    lines = [header, "-" * len(header)]
    for row in rows:
        line = f"{row['kernel']:18} {row['shape'][:44]:44} {'yes' if row['correct'] else 'NO':4}"
        if on_gpu and row["correct"]:
            baselines = ", ".join(f"{name} {x:.2f}x" for name, x in row.get("speedup_vs", {}).items())
            line += (f" {fmt(row, 'ms', '9.4f')} {fmt(row, 'gb_per_s', '8.0f')} {fmt(row, 'pct_of_copy', '6.1f')}"
                     f" {fmt(row, 'tflop_per_s', '8.1f')} {fmt(row, 'speedup_vs_reference', '7.1f')}  {baselines}")
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

    from miniyaie.backends.choose import prepare_backend

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
