"""Chapter 7's challenge: what rank 0 tells its workers, in as few bytes as it can.

Every step, rank 0 sends the workers what they need to replay its model
call (Task 7.4). What goes in that message is a design: what a worker must
be told, what it can work out, what it already knows from the last step.
A seeded workload (24 requests, half sharing a system prompt, chunked
prefill, 24 greedy tokens each) runs on two thread ranks with a tiny
random-weight Llama; every object rank 0 broadcasts is measured as pickled
bytes, as gloo's broadcast_object_list sends it. Score: those bytes per
generated token (deterministic). The tokens must equal one rank's, or no
score. The baseline sends the reference's step with block tables laid out
statically, every row as wide as the longest sequence the model allows
(what a CUDA-graph replay wants).
"""

from __future__ import annotations

import pickle
import random
import tempfile
from pathlib import Path

from miniyaie.challenges.base import Challenge

MAX_TOKENS, REQUESTS, BLOCK_SIZE, MAX_POSITIONS = 24, 24, 4, 512


def tiny_checkpoint(directory: Path) -> Path:
    """A random-weight Llama with 4 query and 2 KV heads, saved as a Hugging Face directory (seeded)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=MAX_POSITIONS)
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory


def prompts(seed: int = 0) -> list[list[int]]:
    """Requests sharing a system prompt (prefix-cache hits) and some long ones (several prefill chunks)."""
    rng = random.Random(seed)
    system = [rng.randrange(3, 512) for _ in range(30)]
    return [(system if i % 2 else []) + [rng.randrange(3, 512) for _ in range(rng.randint(4, 90))] for i in range(REQUESTS)]


class CountingGroup:
    """Rank 0's group with broadcast_object measured: the pickled size of every object rank 0 sends."""

    def __init__(self, group, static_tables: bool = False):
        self._group, self.static_tables, self.messages, self.bytes = group, static_tables, 0, 0

    def broadcast_object(self, obj=None):
        if obj is not None:
            self.messages += 1
            self.bytes += len(pickle.dumps(_static(obj) if self.static_tables else obj, protocol=pickle.HIGHEST_PROTOCOL))
        return self._group.broadcast_object(obj)

    def __getattr__(self, name):
        return getattr(self._group, name)


def _static(obj):
    """The baseline's message: the step with every block-table row as wide as MAX_POSITIONS needs."""
    import dataclasses

    import torch.nn.functional as F

    meta = getattr(obj, "meta", None)
    if meta is None:
        return obj
    tables = meta.block_tables
    padded = F.pad(tables, (0, MAX_POSITIONS // BLOCK_SIZE - tables.shape[1]))
    return dataclasses.replace(obj, meta=dataclasses.replace(meta, block_tables=padded))


def generate(tp: int, static_tables: bool = False) -> dict:
    """Greedy tokens of every request on `tp` thread ranks, and what rank 0 broadcast."""
    from miniyaie.distributed import ThreadRanks, attach_engine, load_rank_model, serve_as_worker
    from miniyaie.engine import EngineConfig, LLMEngine
    from miniyaie.model import SamplingParams

    with tempfile.TemporaryDirectory() as tmp:
        path = tiny_checkpoint(Path(tmp))
        config = EngineConfig(block_size=BLOCK_SIZE, num_blocks=160, max_num_batched_tokens=64, max_num_seqs=12)

        def rank(group):
            model = load_rank_model(path, group)
            if group.rank != 0:
                return serve_as_worker(group, model)
            counting = CountingGroup(group, static_tables)
            engine = LLMEngine(model, config)
            if tp > 1:
                attach_engine(engine, counting, "auto")
            try:
                ids = [engine.add_request(p, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)) for p in prompts()]
                tokens = {rid: [] for rid in ids}
                steps = 0
                while engine.has_unfinished() and steps < 2000:
                    steps += 1
                    for event in engine.step():
                        tokens[event.request_id].append(event.token_id)
                return {"tokens": [tokens[rid] for rid in ids], "steps": steps,
                        "messages": counting.messages, "bytes": counting.bytes}
            finally:
                if tp > 1:
                    group.broadcast_object(None)

        return ThreadRanks(tp, timeout_s=60).run(rank)[0]


def score(static_tables: bool = False) -> float:
    """Bytes rank 0 broadcast per generated token; ValueError when two ranks answer otherwise than one."""
    alone, parallel = generate(1), generate(2, static_tables)
    if parallel["tokens"] != alone["tokens"]:
        raise ValueError("on two ranks the greedy tokens differ from one rank's: no score (miniyaie grade 7 shows why)")
    return parallel["bytes"] / sum(map(len, parallel["tokens"]))


CHALLENGE = Challenge(
    number=7,
    title="what rank 0 tells its workers, in as few bytes as it can",
    metric="control-plane bytes per generated token",
    unit="bytes, pickled as broadcast_object sends them",
    higher_is_better=False,
    workload=(f"{REQUESTS} seeded requests (half share a 30-token system prompt, up to 120 tokens, chunked prefill "
              f"in 64-token steps, {MAX_TOKENS} greedy tokens each) on two thread ranks, a tiny random Llama"),
    run=score,
    baseline=lambda: score(static_tables=True),
    correctness_tests=["tests/ch07_tensor_parallel/test_parallel_engine.py"],
    note=("Deterministic: the same on every machine. Baseline: the reference's step with static block tables "
          f"({MAX_POSITIONS // BLOCK_SIZE} blocks a row, the longest sequence the model allows)."),
)
