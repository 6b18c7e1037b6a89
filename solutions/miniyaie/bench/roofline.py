"""The roofline of `bench offline`'s decode steps: what chapter 5's step_cost predicts next to what they took.

The machine's two numbers are measured here unless given (`--machine
GBPS,GFLOPS`): the bandwidth of a large copy (bytes read + bytes written per
second) and the FLOP/s of a square matmul in the model's dtype, each the best
of a few tries. They are what this process can reach with its threads, not
a data sheet's peaks.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from dataclasses import replace

import torch

from miniyaie.engine.step_cost import Machine, SeqStep, roofline, step_cost
from miniyaie.model import ModelConfig


def measure_machine(dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu", copy_mib: int = 256,
                    matmul_size: int = 1024, tries: int = 3) -> Machine:
    """Copy bandwidth and matmul FLOP/s of this process on `device` (best of `tries`, after one untimed try)."""
    src = torch.ones(copy_mib * 2**20 // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    a = torch.randn(matmul_size, matmul_size, dtype=dtype, device=device)
    b = torch.randn(matmul_size, matmul_size, dtype=dtype, device=device)
    sync = torch.cuda.synchronize if src.is_cuda else (lambda: None)

    def seconds(fn) -> float:
        sync()
        start = time.perf_counter()
        fn()
        sync()
        return time.perf_counter() - start

    seconds(lambda: (dst.copy_(src), torch.mm(a, b)))  # first touch of the pages, lazy set-up of the kernels
    copy_s = min(seconds(lambda: dst.copy_(src)) for _ in range(tries))
    matmul_s = min(seconds(lambda: torch.mm(a, b)) for _ in range(tries))
    return Machine(bytes_per_s=2 * src.nbytes / copy_s, flops_per_s=2 * matmul_size**3 / matmul_s,
                   name=f"measured: {copy_mib} MiB copy, {matmul_size}^3 {str(dtype).removeprefix('torch.')} matmul")


def parse_machine(text: str) -> Machine:
    """'GBPS,GFLOPS' (e.g. '20,150') -> a Machine."""
    gbps, _, gflops = text.partition(",")
    return Machine(bytes_per_s=float(gbps) * 1e9, flops_per_s=float(gflops) * 1e9, name=f"given: {gbps} GB/s, {gflops} GFLOP/s")


def decode_steps(config: ModelConfig, step_chunks: list, step_seconds: list[float], machine: Machine, dtype_bytes: int,
                 weight_bytes: float | None = None) -> dict | None:
    """The steps whose every chunk is one sampled token (pure decode): their median measured time next to
    the median of what the roofline predicts for each, and the verdict; None if there was no such step.
    `dtype_bytes` is the K/V cache's bytes per number; `weight_bytes`, the weights' per weight (the same by
    default; under a fraction of it for weights in blocks: 0.72 for the bundled model's Q4_1 file)."""
    predicted, measured, bounds, batch, context = [], [], Counter(), [], []
    for chunks, seconds in zip(step_chunks, step_seconds):
        if not chunks or any(n != 1 or not samples for n, _, samples in chunks):
            continue
        seqs = [SeqStep(n, start, samples) for n, start, samples in chunks]
        cost = step_cost(config, seqs, dtype_bytes, dtype_bytes)
        if weight_bytes is not None:  # the weights' bytes scaled to what blocks hold per weight
            cost = replace(cost, weight_bytes=round(cost.weight_bytes * weight_bytes / dtype_bytes))
        line = roofline(cost, machine)
        predicted.append(line.seconds)
        measured.append(seconds)
        bounds[line.bound] += 1
        batch.append(len(seqs))
        context.append(statistics.mean(s.context for s in seqs))
    if not predicted:
        return None
    return dict(steps=len(predicted), median_batch=statistics.median(batch), median_context=round(statistics.median(context), 1),
                predicted_s=statistics.median(predicted), measured_s=statistics.median(measured),
                bound=bounds.most_common(1)[0][0], bounds=dict(bounds), machine=machine.name,
                machine_gb_s=round(machine.bytes_per_s / 1e9, 2), machine_gflop_s=round(machine.flops_per_s / 1e9, 2))


def format_line(decode: dict) -> str:
    share = decode["predicted_s"] / decode["measured_s"]
    return (f"decode steps ({decode['steps']}, median batch {decode['median_batch']:g}, context {decode['median_context']:g}): "
            f"measured {decode['measured_s'] * 1e3:.2f} ms, roofline {decode['predicted_s'] * 1e3:.2f} ms "
            f"({decode['bound']}-bound on {decode['machine_gb_s']:g} GB/s, {decode['machine_gflop_s']:g} GFLOP/s; "
            f"the roofline is {share:.0%} of the time)")
