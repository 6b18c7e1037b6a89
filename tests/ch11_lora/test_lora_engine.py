"""Chapter 11 end to end: the engine serves adapters per request, each request's greedy tokens are peft's.

One batch mixes three adapters (different ranks, targets, rslora) and requests without one, a request
with n = 2 among them; every completion's tokens must equal transformers' generate on peft's model with
that adapter merged into the weights (merge_and_unload), token for token: in plain batches, under
preemption (a tiny KV pool), with chunked prefill (a small token budget) and with the radix cache on.
"""

from __future__ import annotations

import pytest
from engine_driver import completions, make_engine, oracle, random_prompts, run

from miniyaie.engine import EngineConfig, InvalidRequestError, SamplingParams
from miniyaie.lora import AdapterError

pytestmark = [pytest.mark.task(f"11.{n}") for n in range(1, 6)]  # end to end, but for own marks

MAX_TOKENS = 10
ADAPTER_OF_REQUEST = ["all-r8", "qv-r2", None, "mlp-r4-rslora", "all-r8", None, "qv-r2"]
N_OF_REQUEST = [1, 1, 1, 2, 1, 1, 1]  # one request forks a second completion after its prompt
SCENARIOS = {
    "mixed batch": dict(),
    "preemption": dict(num_blocks=16, decode_reserve=0.0),  # 64 tokens of KV for ~180 wanted at once
    "chunked prefill": dict(max_num_batched_tokens=8, long_prefill_token_threshold=4),
    "radix cache": dict(enable_prefix_caching=True),
}


def prompts_for(scenario: str) -> list[list[int]]:
    prompts = random_prompts([5, 17, 9, 21, 13, 6, 19], seed=1)
    if scenario == "radix cache":  # a 12-token prefix shared by every request, whatever its adapter
        shared = random_prompts([12], seed=2)[0]
        prompts = [shared + p for p in prompts]
    return prompts


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_each_request_gets_peft_merged_models_tokens(lora_setup, scenario):
    settings = {"enable_prefix_caching": False, **SCENARIOS[scenario]}
    engine = make_engine(lora_setup, ["all-r8", "qv-r2", "mlp-r4-rslora"], **settings)
    prompts = prompts_for(scenario)
    ids, tokens, _, _, errors = run(engine, list(zip(prompts, ADAPTER_OF_REQUEST, N_OF_REQUEST)), MAX_TOKENS)
    assert not errors, f"{scenario}: requests failed: {errors}"
    for rid, prompt, adapter, n in zip(ids, prompts, ADAPTER_OF_REQUEST, N_OF_REQUEST):
        want = oracle(lora_setup, adapter, prompt, MAX_TOKENS)
        for cid in completions(rid, n):
            who = f"adapter {adapter}" if adapter else "no adapter"
            assert tokens[cid] == want, f"{scenario}: completion {cid} ({who}, {len(prompt)}-token prompt) differs from peft's merged model"
    stats = engine.stats
    if scenario == "preemption":
        assert stats["num_preemptions"] > 0, "the tiny pool was meant to preempt someone"
    if scenario == "radix cache":
        assert stats["cached_tokens"] > 0, "same-adapter requests share the 12-token prefix"
        engine.memory.check_integrity()
    assert stats["request_blocks"] == 0, "every request's KV blocks came back"


def test_a_batch_of_one_adapter_or_one_per_prompt_through_generate(lora_setup):
    engine = make_engine(lora_setup, ["attn-r3", "o-down-r1"])
    prompts = random_prompts([7, 11, 4], seed=3)
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    one = engine.generate(prompts, params, adapter="attn-r3")
    assert [g.token_ids for g in one] == [oracle(lora_setup, "attn-r3", p, 6) for p in prompts]
    names = ["o-down-r1", None, "attn-r3"]
    each = engine.generate(prompts, params, adapter=names)
    assert [g.token_ids for g in each] == [oracle(lora_setup, name, p, 6) for name, p in zip(names, prompts)]
    with pytest.raises(InvalidRequestError, match="2 names for 3 prompts"):
        engine.generate(prompts, params, adapter=["attn-r3", None])


def test_an_unknown_adapter_is_refused_at_the_door_and_the_engine_serves_on(lora_setup):
    engine = make_engine(lora_setup, ["all-r8", "qv-r2"])
    prompt = random_prompts([6], seed=4)[0]
    with pytest.raises(InvalidRequestError, match=r"unknown adapter 'nope'; this engine serves 'all-r8', 'qv-r2'"):
        engine.add_request(prompt, SamplingParams(max_tokens=4, adapter="nope"))
    assert not engine.has_unfinished() and engine.stats["prompt_tokens"] == 0, "a refused request changes nothing"
    assert engine.generate([prompt], SamplingParams(max_tokens=4, ignore_eos=True), adapter="qv-r2")[0].token_ids == \
        oracle(lora_setup, "qv-r2", prompt, 4)
    plain = make_engine(lora_setup, {}, enable_prefix_caching=False)
    with pytest.raises(InvalidRequestError, match="unknown adapter 'qv-r2'; this engine serves no adapters"):
        plain.add_request(prompt, SamplingParams(adapter="qv-r2"))
    with pytest.raises(InvalidRequestError, match="adapter must be"):
        SamplingParams(adapter="")


def test_bad_settings_and_bad_adapters_are_refused_at_start_with_one_line(lora_setup):
    path = str(lora_setup.adapters["qv-r2"])
    for settings, message in [
        (dict(lora_adapters=[("a", path), ("a", path)]), "the name 'a' is used twice"),
        (dict(lora_adapters={"": path}), "name must be a non-empty string"),
        (dict(lora_adapters={"a": path}, max_loras=0), "max_loras must be a whole number >= 1"),
        (dict(lora_adapters={"a": path}, max_lora_rank=0), "max_lora_rank must be a whole number >= 1"),
        (dict(lora_adapters={"a": path}, speculative="ngram"), "does not run with speculative decoding"),
        (dict(lora_adapters={"a": path}, overlap_schedule=True), "overlap_schedule"),
    ]:
        with pytest.raises(ValueError, match=message) as refused:
            EngineConfig(**settings)
        assert "\n" not in str(refused.value)
    assert EngineConfig(lora_adapters=[("a", path)]).lora_adapters == {"a": path}
    with pytest.raises(AdapterError, match=r"adapter 'all-r8': rank r=8 is outside 1..4"):
        make_engine(lora_setup, ["qv-r2", "all-r8"], max_lora_rank=4)
    with pytest.raises(AdapterError, match="adapter 'gone'.* is not a directory"):
        make_engine(lora_setup, {"gone": str(lora_setup.folder / "no-such-adapter")})
