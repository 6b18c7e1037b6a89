"""Timing, not a test: the cpu backend's decode kernel on one layer, K and V from memory and from cache.

    LD_PRELOAD=<tcmalloc>:<venv>/lib/libiomp5.so python -m miniyaie.bench.lab.bench_decode_attention [--threads 2]

32 decode rows of 560 keys (the shared-prefix workload's decode steps), SmolLM2's heads
(9 query, 3 KV, 64 wide), blocks of 16 handed out shuffled. "from memory": every row has
its own blocks (27.5 MB of K and V, more than the caches hold); "in cache": every row reads
the same blocks. Medians of 300 calls after 10 warm-ups; the memory case also as the rate at
which it reads K and V, to set beside the machine's rate for reading one large array.
"""
import argparse
import dataclasses

import torch
from miniyaie.bench.lab.bench_chunk_attention import HEAD_DIM, KV_HEADS, step
from miniyaie.bench.lab.bench_linear import median_us

from miniyaie.backends.cpu.paged_attention import PagedCpuAttentionBackend

ROWS, KEYS = 32, 560


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    torch.set_num_threads(parser.parse_args().threads)
    backend = PagedCpuAttentionBackend()
    assert backend.library is not None, "the C++ kernels did not build (is g++ installed?)"
    scale, nothing = HEAD_DIM**-0.5, torch.zeros(0, KV_HEADS, HEAD_DIM)
    q, k_cache, v_cache, own = step([(1, KEYS)] * ROWS)
    same = dataclasses.replace(own, block_tables=own.block_tables[:1].repeat(ROWS, 1))  # a new step for the backend
    kv_bytes = ROWS * KEYS * KV_HEADS * HEAD_DIM * 4 * 2
    big = torch.randn(64 << 20)  # 256 MB
    stream_us = median_us(lambda: big.sum(), calls=20, warmups=10)
    print(f"reading one 256 MB array: {big.numel() * 4 / stream_us / 1e3:.1f} GB/s")
    for label, meta in (("from memory", own), ("in cache", same)):
        us = median_us(lambda: backend.forward(q, nothing, nothing, k_cache, v_cache, meta, scale), calls=300, warmups=10)
        rate = f", {kv_bytes / us / 1e3:.0f} GB/s of K and V" if meta is own else ""
        print(f"{ROWS} rows x {KEYS} keys, {label}: {us:.0f} us{rate}")


if __name__ == "__main__":
    main()
