"""Chapter 11's engine tests share these: an LLMEngine over the tiny Llama with its peft adapters, a driver that steps
it to the end, and peft's merged model's greedy tokens (the oracle) for a prompt under an adapter."""

from __future__ import annotations

from collections import defaultdict

import torch

from miniyaie.engine import EngineConfig, SamplingParams
from miniyaie.engine.admission import child_request_id
from miniyaie.engine.llm_engine import LLMEngine
from miniyaie.model import load_model

MAX_STEPS = 2000  # far more than any test here needs: a request that never finishes fails the test, never hangs it
_ORACLE: dict[tuple, list[int]] = {}


def make_engine(setup, adapters=None, **settings) -> LLMEngine:
    """An LLMEngine over the tiny base model serving `adapters` (names of the setup's, or name -> path)."""
    names = adapters if adapters is not None else list(setup.adapters)
    paths = names if isinstance(names, dict) else {name: str(setup.adapters[name]) for name in names}
    settings = {"block_size": 4, "num_blocks": 256, "max_lora_rank": 8, **settings}
    return LLMEngine(load_model(setup.base_dir), EngineConfig(lora_adapters=paths, **settings))


def oracle(setup, adapter: str | None, prompt: list[int], max_tokens: int) -> list[int]:
    """peft's merged model's greedy tokens (transformers' generate), or the base model's for no adapter."""
    key = (adapter, tuple(prompt), max_tokens)
    if key not in _ORACLE:
        model = setup.base if adapter is None else setup.merged(adapter)
        with torch.no_grad():
            ids = torch.tensor([prompt])  # the whole mask given: transformers would infer one from a pad id
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens, eos_token_id=None,
                                 do_sample=False, pad_token_id=0)
        _ORACLE[key] = out[0, len(prompt):].tolist()
    return _ORACLE[key]


def run(engine: LLMEngine, requests, max_tokens: int):
    """Add each (prompt, adapter, n) and step to the end. Returns (request ids, tokens by completion id, the
    step number of each completion's first and last token, the errors by completion id)."""
    ids = [engine.add_request(prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True, n=n, adapter=adapter))
           for prompt, adapter, n in requests]
    result = drive(engine)
    assert not engine.has_unfinished(), f"the engine still had work after {MAX_STEPS} steps"
    return ids, *result


def drive(engine: LLMEngine, steps: int = MAX_STEPS):
    """Step `engine` until it has no work or `steps` steps are done: (tokens, first step, last step, errors) by completion id."""
    tokens, first, last, errors = defaultdict(list), {}, {}, {}
    for step in range(steps):
        if not engine.has_unfinished():
            break
        for event in engine.step():
            if event.error is not None:
                errors[event.request_id] = event.error
                continue
            tokens[event.request_id].append(event.token_id)
            first.setdefault(event.request_id, step)
            last[event.request_id] = step
    return tokens, first, last, errors


def completions(request_id: str, n: int) -> list[str]:
    return [request_id] + [child_request_id(request_id, i) for i in range(1, n)]


def random_prompts(lengths, seed: int = 0, vocab: int = 256) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]
