"""Timing, not a test: the cpu backend's chunk kernel against the batched torch backend (SDPA) on chunks.

    python -m miniyaie.bench.lab.bench_chunk_attention [--threads 2]

One layer of SmolLM2's shapes (9 query and 3 KV heads of 64), blocks of 16 handed out in a
shuffled order: fresh prompts (a causal chunk over its own keys) and the shared-prefix
workload's extends (7 questions of 32 tokens over a 544-token context). The median of 30
calls after 5 warm-ups, each way; outputs are checked to agree first.
"""
import argparse

import torch
from miniyaie.bench.lab.bench_linear import median_us

from miniyaie.model import AttentionMetadata
from miniyaie.backends.batched_attention import BatchedTorchAttentionBackend
from miniyaie.backends.cpu.paged_attention import PagedCpuAttentionBackend

HEADS, KV_HEADS, HEAD_DIM, BLOCK = 9, 3, 64, 16


def step(chunks: list[tuple[int, int]], seed: int = 0):
    """(q, k_cache, v_cache, meta) for chunks of (queries, keys), the chunks' own K/V already cached."""
    g = torch.Generator().manual_seed(seed)
    blocks = [-(-keys // BLOCK) for _, keys in chunks]
    order = torch.randperm(sum(blocks) + 1, generator=g).tolist()
    k_cache = torch.randn((sum(blocks) + 1) * BLOCK, KV_HEADS, HEAD_DIM, generator=g)
    v_cache = torch.randn_like(k_cache)
    width, tables = max(blocks), []
    for n in blocks:
        tables.append(order[:n] + [0] * (width - n))
        order = order[n:]
    meta = AttentionMetadata(query_lens=[q for q, _ in chunks], seq_lens=[k for _, k in chunks],
                             slot_mapping=torch.zeros(0, dtype=torch.int64), block_tables=torch.tensor(tables),
                             block_size=BLOCK)
    q = torch.randn(sum(q for q, _ in chunks), HEADS, HEAD_DIM, generator=g)
    return q, k_cache, v_cache, meta


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    torch.set_num_threads(parser.parse_args().threads)
    kernel, batched = PagedCpuAttentionBackend(), BatchedTorchAttentionBackend()
    assert kernel.library is not None, "the C++ kernels did not build (is g++ installed?)"
    scale, nothing = HEAD_DIM**-0.5, torch.zeros(0, KV_HEADS, HEAD_DIM)
    print(f"{'chunks (queries x keys)':32} {'kernel us':>10} {'SDPA us':>10} {'ratio':>6}")
    for chunks in ([(96, 96)], [(192, 192)], [(288, 288)], [(512, 512)], [(32, 544)] * 7):
        q, k_cache, v_cache, meta = step(chunks)

        def run(backend):  # no new K/V to write: the chunks' keys are in the cache already
            return backend.forward(q, nothing, nothing, k_cache, v_cache, meta, scale)

        torch.testing.assert_close(run(kernel), run(batched), rtol=1e-4, atol=1e-4)
        mine, theirs = median_us(lambda: run(kernel)), median_us(lambda: run(batched))
        label = f"{len(chunks)} x ({chunks[0][0]} x {chunks[0][1]})"
        print(f"{label:32} {mine:10.0f} {theirs:10.0f} {theirs / mine:5.2f}x")


if __name__ == "__main__":
    main()
