"""Timing, not a test: 30 layers of attention on SmolLM2's shapes, one backend vs another, one process.

    python -m miniyaie.bench.lab.bench_attention                  # batched torch vs chapter 0's per-sequence reference
    python -m miniyaie.bench.lab.bench_attention --this cpu --against torch --threads 2   # C++ decode kernel vs batched torch
    git show 39ccc5b:solutions/miniyaie/model/batched_attention.py > /tmp/before.py
    python -m miniyaie.bench.lab.bench_attention --against /tmp/before.py   # against an earlier version

Random block tables (blocks handed out shuffled), 9 query heads over 3 KV heads of 64,
blocks of 16, one thread unless --threads; each step is timed 7 times, the two backends interleaved,
and the medians are printed. Outputs are checked to agree first.
"""
import argparse, copy, importlib.util, random, statistics, sys, time
import torch
from miniyaie.model import AttentionMetadata, TorchAttentionBackend
from miniyaie.backends.batched_attention import BatchedTorchAttentionBackend
from miniyaie.backends.cpu.paged_attention import PagedCpuAttentionBackend

BY_NAME = {"torch": BatchedTorchAttentionBackend, "cpu": PagedCpuAttentionBackend, "reference": TorchAttentionBackend}

KV, D, BS, HEADS, LAYERS = 3, 64, 16, 9, 30
STEPS = {  # name: (decode rows, context low, context high, prefill chunk tokens)
    "decode 32, contexts U[32,384]": (32, 32, 384, 0),
    "decode 64, contexts U[32,384]": (64, 32, 384, 0),
    "decode 32, contexts U[540,576]": (32, 540, 576, 0),
    "decode 16 + a 448-token chunk": (16, 32, 384, 448),
}


def make_step(rows, low, high, chunk, rng):
    contexts, query_lens = [rng.randint(low, high) for _ in range(rows)], [1] * rows
    if chunk:
        contexts.append(chunk + 64)
        query_lens.append(chunk)
    num_blocks = sum(-(-c // BS) for c in contexts) + 1
    order = list(range(num_blocks))
    rng.shuffle(order)
    tables, used = [], 0
    for c in contexts:
        tables.append(order[used : used + -(-c // BS)])
        used += len(tables[-1])
    width = max(map(len, tables))
    slots = [t[p // BS] * BS + p % BS for t, c, n in zip(tables, contexts, query_lens) for p in range(c - n, c)]
    meta = AttentionMetadata(query_lens, contexts, torch.tensor(slots), torch.tensor([t + [0] * (width - len(t)) for t in tables]), BS)
    tokens = sum(query_lens)
    cache = [torch.randn(LAYERS, num_blocks * BS, KV, D) for _ in range(2)]
    qkv = torch.randn(tokens, HEADS, D), torch.randn(tokens, KV, D), torch.randn(tokens, KV, D)
    return meta, cache, qkv


def run_step(backend, meta, cache, qkv):
    meta = copy.copy(meta)  # a new step: the backend plans it afresh
    for layer in range(LAYERS):
        out = backend.forward(*qkv, cache[0][layer], cache[1][layer], meta, D**-0.5)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--this", choices=BY_NAME, default="torch", help="the backend timed (default: torch, batched)")
    parser.add_argument("--against", default="reference",
                        help="a backend name (reference, torch, cpu) or a batched_attention.py file to compare with")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    this_backend = BY_NAME[args.this]
    if args.against in BY_NAME:
        other, other_name = BY_NAME[args.against], args.against
    else:
        spec = importlib.util.spec_from_file_location("against", args.against)
        module = sys.modules["against"] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
        spec.loader.exec_module(module)
        other, other_name = module.BatchedTorchAttentionBackend, args.against
    rng = random.Random(0)
    for name, shape in STEPS.items():
        step = make_step(*shape, rng)
        torch.testing.assert_close(run_step(this_backend(), *step), run_step(other(), *step), rtol=1e-4, atol=1e-4)
        times = {"this": [], "other": []}
        for _ in range(7):
            for key, backend in (("this", this_backend), ("other", other)):
                start = time.perf_counter()
                run_step(backend(), *step)
                times[key].append(time.perf_counter() - start)
        this, that = statistics.median(times["this"]), statistics.median(times["other"])
        print(f"{name:32s} this {this * 1e3:7.1f} ms   {other_name} {that * 1e3:7.1f} ms   this/that {this / that:.2f}")


if __name__ == "__main__":
    main()
