"""Chapter 0's challenge: generate a batch of uneven prompts with the smallest KV cache.

Your lever: your `generate_stream` (model/generate.py) itself. The cache it builds is its own
design (how many slots, how sequences are laid out in them); the tests pin only the tokens.
Score: the most KV cache slots (one slot = one token's K and V in every layer) alive at once
during one `generate` call; deterministic (counted, not timed).
"""

from __future__ import annotations

import random
import weakref

from miniyaie.challenges.base import Challenge

CONTEXT, MAX_TOKENS = 512, 32
PROMPT_LENS = [4, 9, 17, 30, 48, 75, 120, 200]  # a chat batch: mostly short, one long


def tiny_config():
    from miniyaie.model import ModelConfig

    return ModelConfig(family="llama", vocab_size=256, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                       num_kv_heads=2, head_dim=8, rms_norm_eps=1e-6, max_position_embeddings=CONTEXT, rope_theta=10000.0)


def peak_slots() -> float:
    """Run one greedy generate over the batch; count the KV slots of every KVCache alive at its peak."""
    import torch

    from miniyaie.model import CausalLM, SamplingParams, generate
    from miniyaie.model.kv_cache import KVCache

    torch.manual_seed(0)
    model = CausalLM(tiny_config()).eval()
    rng = random.Random(0)
    prompts = [[rng.randrange(1, 256) for _ in range(n)] for n in PROMPT_LENS]
    live, peak = [0], [0]
    original = KVCache.__init__

    def counting_init(self, config, num_slots, *args, **kwargs):
        original(self, config, num_slots, *args, **kwargs)
        live[0] += num_slots
        peak[0] = max(peak[0], live[0])
        weakref.finalize(self, lambda n=num_slots: live.__setitem__(0, live[0] - n))

    KVCache.__init__ = counting_init
    try:
        with torch.no_grad():
            out = generate(model, prompts, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True))
    finally:
        KVCache.__init__ = original
    if [len(g.token_ids) for g in out] != [MAX_TOKENS] * len(prompts):
        raise AssertionError("generate did not return max_tokens tokens for every prompt")
    return float(peak[0])


def every_sequence_a_whole_context() -> float:
    """The simple design: each sequence reserves the model's whole context."""
    return float(len(PROMPT_LENS) * CONTEXT)


CHALLENGE = Challenge(
    number=0,
    title="generate a batch of uneven prompts with the smallest KV cache",
    metric="peak KV cache slots",
    unit="token slots",
    higher_is_better=False,
    workload=(f"a tiny random Llama (context {CONTEXT}), {len(PROMPT_LENS)} prompts of {', '.join(map(str, PROMPT_LENS))} "
              f"tokens, {MAX_TOKENS} greedy tokens each, ignore_eos"),
    run=peak_slots,
    baseline=every_sequence_a_whole_context,
    correctness_tests=["tests/ch00_model/test_generate.py", "tests/ch00_model/test_generation.py"],
    note=f"Every sequence's K/V must be in the cache at its last step: no design goes below "
         f"{sum(PROMPT_LENS) + len(PROMPT_LENS) * (MAX_TOKENS - 1)} slots.",
)
