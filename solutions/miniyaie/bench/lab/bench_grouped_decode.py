"""Timing, not a test: the decode kernel with rows that share a prefix attended together or one by one.

    LD_PRELOAD=<tcmalloc>:<venv>/lib/libiomp5.so python -m miniyaie.bench.lab.bench_grouped_decode [--rounds 5]

The shared-prefix workload's decode step on one layer: 4 groups of 8 rows, each row 560 keys of
which the first 512 (32 blocks of 16) are its group's, SmolLM2's heads, blocks handed out
shuffled and the rows in a shuffled order. "one by one" makes every row a group of its own
(round nine's kernel); "together" is the engine's grouping. The two alternate, `--rounds` times,
so that a noisy machine slows both alike; each figure is a median of 100 calls.
"""
import argparse
import dataclasses

import torch
from miniyaie.bench.lab.bench_chunk_attention import HEAD_DIM, KV_HEADS, step
from miniyaie.bench.lab.bench_linear import median_us

import miniyaie.backends.cpu.paged_attention as paged

GROUPS, ROWS_PER_GROUP, PREFIX_BLOCKS, KEYS = 4, 8, 32, 560


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = GROUPS * ROWS_PER_GROUP
    q, k_cache, v_cache, meta = step([(1, KEYS)] * rows)
    tables = meta.block_tables.clone()
    for first in range(0, rows, ROWS_PER_GROUP):  # each group's rows begin with its first row's blocks
        tables[first : first + ROWS_PER_GROUP, :PREFIX_BLOCKS] = tables[first, :PREFIX_BLOCKS]
    meta = dataclasses.replace(meta, block_tables=tables[torch.randperm(rows, generator=torch.Generator().manual_seed(0))])
    nothing, grouping = torch.zeros(0, KV_HEADS, HEAD_DIM), paged.group_by_first_block
    times = {"one by one": [], "together": []}
    outputs = {}
    for _ in range(args.rounds):
        for label, max_rows in (("one by one", 1), ("together", paged.MAX_ROWS_PER_GROUP)):
            paged.group_by_first_block = lambda tables, max_rows=max_rows: grouping(tables, max_rows)
            backend, step_meta = paged.PagedCpuAttentionBackend(), dataclasses.replace(meta)  # a new step for it

            def call():
                return backend.forward(q, nothing, nothing, k_cache, v_cache, step_meta, HEAD_DIM**-0.5)

            outputs[label] = call()
            times[label].append(median_us(call, calls=100, warmups=5))
    paged.group_by_first_block = grouping
    assert torch.equal(outputs["one by one"], outputs["together"]), "the order of reads changed a result"
    print(f"{GROUPS} groups x {ROWS_PER_GROUP} rows x {KEYS} keys ({PREFIX_BLOCKS * 16} shared), {args.threads} threads")
    for label, values in times.items():
        print(f"{label:12} " + " ".join(f"{us:6.0f}" for us in values) + " us")
    ratios = sorted(t / o for t, o in zip(times["together"], times["one by one"]))
    print("together / one by one, round by round: " + " ".join(f"{r:.2f}" for r in ratios) + f"; median {ratios[len(ratios) // 2]:.2f}")


if __name__ == "__main__":
    main()
