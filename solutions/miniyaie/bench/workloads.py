"""The benchmark workloads: random-token prompts, seeded, so every system gets the same ones."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    name: str
    prompts: list[list[int]]
    output_lens: list[int]  # exact new tokens per request (ignore_eos)
    shared_prefix_len: int = 0  # tokens each group shares (0: none)
    group_size: int = 1

    @property
    def num_prompt_tokens(self) -> int:
        return sum(map(len, self.prompts))

    @property
    def num_output_tokens(self) -> int:
        return sum(self.output_lens)

    def optimum_hit_rate(self, block_size: int) -> float:
        """The best prefix-cache hit rate possible: every request but the first of its group
        finds the group prefix, in whole blocks, and at least its last prompt token is computed."""
        if not self.shared_prefix_len:
            return 0.0
        hits = 0
        for i, prompt in enumerate(self.prompts):
            if i % self.group_size:
                hits += min(self.shared_prefix_len, len(prompt) - 1) // block_size * block_size
        return hits / self.num_prompt_tokens


def random_workload(num_requests: int, vocab_size: int, input_len=(32, 256), output_len=(32, 128), seed: int = 0) -> Workload:
    """nano-vllm's workload, scaled down: lengths uniform in the given ranges."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(vocab_size) for _ in range(rng.randint(*input_len))] for _ in range(num_requests)]
    outputs = [rng.randint(*output_len) for _ in range(num_requests)]
    return Workload("random", prompts, outputs)


def shared_prefix_workload(
    num_groups: int, group_size: int, vocab_size: int, prefix_len=512, question_len=32, output_len=32, seed: int = 0
) -> Workload:
    """SGLang's generated-shared-prefix: groups of prompts = one system prompt + a question each.

    Requests arrive group after group, as a user's batches would.
    """
    rng = random.Random(seed)
    prompts = []
    for _ in range(num_groups):
        prefix = [rng.randrange(vocab_size) for _ in range(prefix_len)]
        prompts += [prefix + [rng.randrange(vocab_size) for _ in range(question_len)] for _ in range(group_size)]
    return Workload("shared-prefix", prompts, [output_len] * len(prompts), prefix_len, group_size)
