"""The benchmark workloads: random-token prompts, seeded, so every system gets the same ones."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path


# How the requests choose their tokens (`--sampling`): every system gets the same settings.
SAMPLING = {
    "greedy": {"temperature": 0.0},
    "sampled": {"temperature": 0.7, "top_p": 0.9, "top_k": 50},  # a typical chat setting, as vLLM's and SGLang's benchmarks pass it
}


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


# Modules whose docstrings are the copy workload's passages: text about this engine, shipped inside it.
COPY_SOURCES = ("engine/llm_engine.py", "scheduler/scheduler.py", "paged/memory.py", "radix/memory.py",
                "speculative/step.py", "engine/detokenizer.py", "api/app.py", "backends/choose.py")


def copy_passages(max_chars: int = 700) -> list[str]:
    """The copy workload's passages: the first max_chars characters (whole lines) of each source's docstring
    (read from the files, not imported: the passages are the same whichever tree MINIYAIE_IMPL selects)."""
    import ast

    root = Path(__file__).resolve().parents[1]  # miniyaie/
    passages = []
    for name in COPY_SOURCES:
        text = (ast.get_docstring(ast.parse((root / name).read_text())) or "").strip()
        cut = text[:max_chars]
        passages.append(cut[: cut.rfind("\n")] if len(text) > max_chars and "\n" in cut else cut)
    return [p for p in passages if p]


def copy_workload(tokenizer, num_requests: int, output_len: int = 128) -> Workload:
    """A copy-heavy workload: each request asks the model to repeat a passage of this engine's own
    documentation word for word (greedy, `output_len` tokens each). Speculative decoding's n-gram proposer
    finds most of the answer in the prompt; random-token prompts give it nothing to find."""
    passages = copy_passages()
    prompts = []
    for i in range(num_requests):
        message = "Repeat the following text exactly, word for word:\n\n" + passages[i % len(passages)]
        if getattr(tokenizer, "chat_template", None):
            ids = tokenizer.apply_chat_template([{"role": "user", "content": message}], add_generation_prompt=True,
                                                tokenize=True, return_dict=False)
        else:
            ids = tokenizer(message)["input_ids"]
        prompts.append(list(ids))
    return Workload("copy", prompts, [output_len] * num_requests)
