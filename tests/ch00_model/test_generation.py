"""Task 0.5: sampling and the prefill -> decode loop, against transformers' greedy generate."""

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tiny_models import CONFIGS, save_tiny_model, transformers_greedy

from miniyaie.model import PromptTooLongError, SamplingParams, TokenEvent, generate, generate_stream, load_model

SHORT_CONTEXT = 16  # the "short" model's max_position_embeddings: the context caps a generation
_MODELS: dict = {}
_ORACLE: dict = {}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """"llama" and "short" (llama with a 16-token context) -> (our model, transformers' model)."""

    def get(name):
        if name not in _MODELS:
            overrides = {"max_position_embeddings": SHORT_CONTEXT} if name == "short" else {}
            folder = tmp_path_factory.mktemp(name)
            hf_model = save_tiny_model("llama", folder, seed=5, **overrides)
            _MODELS[name] = (load_model(folder), hf_model)
        return _MODELS[name]

    yield get
    _MODELS.clear()
    _ORACLE.clear()


def oracle(name, hf_model, prompt, n):
    """transformers' first n greedy tokens (cached: a longer run's prefix is a shorter run)."""
    key = (name, tuple(prompt))
    if len(_ORACLE.get(key, ())) < n:
        _ORACLE[key] = transformers_greedy(hf_model, prompt, max(n, 8))
    return _ORACLE[key][:n]


def expected_run(name, hf_model, prompts, max_tokens, context, eos, ignore_eos):
    """Each prompt's (tokens, finish reason) by the contract, from the oracle's greedy tokens."""
    runs = []
    for prompt in prompts:
        limit = min(len(prompt) + max_tokens, context) - len(prompt)
        tokens = oracle(name, hf_model, prompt, limit)
        stop = next((i for i, t in enumerate(tokens) if t in eos), None) if not ignore_eos else None
        runs.append((tokens[: stop + 1], "stop") if stop is not None else (tokens, "length"))
    return runs


def expected_events(runs):
    """One event per running sequence per step, in prompt order; the finish reason on a sequence's last."""
    events = []
    for j in range(max(len(tokens) for tokens, _ in runs)):
        for s, (tokens, reason) in enumerate(runs):
            if j < len(tokens):
                events.append(TokenEvent(s, tokens[j], reason if j == len(tokens) - 1 else None))
    return events


@pytest.mark.task("0.5")
@settings(max_examples=30)
@given(
    name=st.sampled_from(["llama", "short"]),
    lengths=st.lists(st.integers(1, 14), min_size=1, max_size=3),
    max_tokens=st.integers(1, 6),
    eos_at=st.none() | st.tuples(st.integers(0, 2), st.integers(0, 5)),
    ignore_eos=st.booleans(),
    seed=st.integers(0, 2**16),
)
@example(name="llama", lengths=[1], max_tokens=1, eos_at=None, ignore_eos=False, seed=0)  # one-token prompt, one token
@example(name="llama", lengths=[4, 7], max_tokens=5, eos_at=(0, 0), ignore_eos=False, seed=1)  # EOS on the first token
@example(name="llama", lengths=[4, 7], max_tokens=5, eos_at=(0, 0), ignore_eos=True, seed=1)  # ... ignored
@example(name="short", lengths=[SHORT_CONTEXT - 1, 3], max_tokens=6, eos_at=None, ignore_eos=False, seed=2)  # room for one
@example(name="llama", lengths=[3, 9, 1], max_tokens=6, eos_at=(1, 2), ignore_eos=False, seed=3)  # one stops mid-way
def test_greedy_stream_matches_transformers(models, name, lengths, max_tokens, eos_at, ignore_eos, seed):
    """Greedy tokens equal transformers', events stream in order with their finish reasons, and every token
    goes through the model once: the prompts together first, then one token per running sequence."""
    model, hf_model = models(name)
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, 320, (n,), generator=g).tolist() for n in lengths]
    context = model.config.max_position_embeddings
    eos = []
    if eos_at is not None and eos_at[0] < len(prompts):  # end-of-sequence = the token a prompt would make at step j
        prompt = prompts[eos_at[0]]
        made = oracle(name, hf_model, prompt, min(len(prompt) + max_tokens, context) - len(prompt))
        eos = [made[min(eos_at[1], len(made) - 1)]]
    runs = expected_run(name, hf_model, prompts, max_tokens, context, eos, ignore_eos)
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos)

    fed = []  # tokens run through the model, per call
    hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: fed.append((list(args) + list(kwargs.values()))[0].numel()), with_kwargs=True
    )
    try:
        events = list(generate_stream(model, prompts, params, eos))
    finally:
        hook.remove()
    want = expected_events(runs)
    assert [(e.seq, e.token_id) for e in events] == [(e.seq, e.token_id) for e in want], (
        "the stream's (prompt, token) pairs differ from transformers' greedy tokens, one event per running "
        f"sequence per step in prompt order (prompt lengths {[len(p) for p in prompts]}, max_tokens {max_tokens}, "
        f"context {context}, eos {eos}, ignore_eos {ignore_eos}):\n got  {[(e.seq, e.token_id) for e in events]}\n "
        f"want {[(e.seq, e.token_id) for e in want]}"
    )
    assert [e.finish_reason for e in events] == [e.finish_reason for e in want], (
        f"finish reasons (eos {eos}, ignore_eos {ignore_eos}, max_tokens {max_tokens}, context {context}): "
        f"got {[e.finish_reason for e in events]}, want {[e.finish_reason for e in want]}"
    )
    steps = max(len(tokens) for tokens, _ in runs)
    want_fed = [sum(lengths)] + [sum(len(tokens) > j for tokens, _ in runs) for j in range(1, steps)]
    assert fed == want_fed, (
        f"tokens run through the model per call: {fed}; with the KV cache the first call runs every prompt "
        f"({sum(lengths)} tokens) and each later call one token per running sequence: {want_fed}"
    )
    outputs = generate(model, prompts, params, eos)
    assert [(o.token_ids, o.finish_reason) for o in outputs] == runs, "generate() collects the stream per prompt, in order"


@pytest.mark.task("0.5")
@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_tiny_models_match_transformers_greedy(kind, tmp_path):
    hf_model = save_tiny_model(kind, tmp_path)
    model = load_model(tmp_path)  # the real loading code, from the saved directory
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 320, (n,), generator=g).tolist() for n in (1, 7, 23)]
    # a batch of prompts of different lengths: each must come out as if alone
    ours = generate(model, prompts, SamplingParams(max_tokens=20, ignore_eos=True))
    for prompt, generation in zip(prompts, ours):
        assert generation.token_ids == transformers_greedy(hf_model, prompt, 20), f"{kind}, a {len(prompt)}-token prompt"
        assert generation.finish_reason == "length"


@pytest.mark.task("0.5")
def test_bad_prompts_raise_before_any_token(models):
    model, _ = models("short")
    params = SamplingParams(max_tokens=4)
    with pytest.raises(ValueError, match="empty"):
        next(generate_stream(model, [[1, 2], []], params))
    with pytest.raises(PromptTooLongError):
        next(generate_stream(model, [[1, 2], [3] * SHORT_CONTEXT], params))
    with pytest.raises(PromptTooLongError):
        generate(model, [[3] * (SHORT_CONTEXT + 4)], params)
    assert len(generate(model, [[3] * (SHORT_CONTEXT - 1)], params)[0].token_ids) == 1, "len(prompt) = context - 1 leaves one"


@pytest.mark.task("0.5")
def test_a_seeded_request_draws_new_random_numbers_at_every_step(tmp_path):
    """A model whose logits are all zero: every step samples from the same uniform distribution over the
    vocabulary. One generator per request (the contract) gives a different draw at each step; a generator
    re-created from the seed at every step gives the same token every time."""
    save_tiny_model("llama", tmp_path, seed=5)
    model = load_model(tmp_path)
    with torch.no_grad():
        model.lm_head.weight.zero_()
    tokens = generate(model, [[5, 6, 7]], SamplingParams(max_tokens=24, temperature=1.0, seed=11, ignore_eos=True))[0].token_ids
    assert len(set(tokens)) > 1, (
        f"24 draws from a uniform distribution over {model.config.vocab_size} tokens all gave {tokens[0]}: is the "
        "generator seeded again at every step? One generator per request, seeded once, draws new numbers each step")


@pytest.mark.task("0.5")
def test_seeded_sampling_repeats_and_follows_its_parameters(models):
    model, hf_model = models("llama")
    prompts = [[5, 6, 7], [8]]
    sampled = SamplingParams(max_tokens=12, temperature=1.5, seed=11, ignore_eos=True)
    first = [o.token_ids for o in generate(model, prompts, sampled)]
    again = [o.token_ids for o in generate(model, prompts, sampled)]
    assert first == again, "the same seed gives the same tokens"
    other = [o.token_ids for o in generate(model, prompts, SamplingParams(max_tokens=12, temperature=1.5, seed=12, ignore_eos=True))]
    assert other != first, "another seed gives other tokens: the draws come from the seeded generator"
    assert first != [oracle("llama", hf_model, p, 12) for p in prompts], "temperature 1.5 samples: not the greedy tokens"
    nucleus = SamplingParams(max_tokens=8, temperature=1.0, top_p=1e-6, seed=3, ignore_eos=True)
    tokens = [o.token_ids for o in generate(model, prompts, nucleus)]
    assert tokens == [oracle("llama", hf_model, p, 8) for p in prompts], "a tiny top_p keeps only the most likely token"
