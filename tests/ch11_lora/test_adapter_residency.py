"""Chapter 11 end to end: adapters in memory. At most max_loras resident, loaded on demand off the step, the least
recently used adapter that no queued or running request uses evicted; an adapter in use is never evicted (its
requests' tokens stay peft's); a load that fails ends its requests alone, with every KV block back; the engine
thread's InferenceEngine reports it all in get_stats()["lora"]."""

from __future__ import annotations

import itertools
import shutil
from collections import defaultdict

import pytest
from engine_driver import make_engine, oracle, random_prompts, run

from miniyaie.engine import EngineConfig, InferenceEngine, InvalidRequestError, RequestFailedError, SamplingParams

pytestmark = [pytest.mark.task(f"11.{n}") for n in range(1, 6)]  # end to end, but for own marks

MAX_TOKENS = 6
A, B, C = "all-r8", "qv-r2", "mlp-r4-rslora"


def lora(engine) -> dict:
    """The engine's adapter counters, as /stats shows them."""
    s = engine.stats
    return {"loads": s["lora_loads"], "evictions": s["lora_evictions"], "failures": s["lora_load_failures"]}


def test_two_slots_three_adapters_least_recently_used_goes(lora_setup):
    engine = make_engine(lora_setup, [A, B, C], max_loras=2)
    prompt = random_prompts([9], seed=7)[0]
    # (adapter run alone, counters after it, resident after it)
    turns = [(A, 1, 0, {A}), (B, 2, 0, {A, B}), (C, 3, 1, {B, C}), (B, 3, 1, {B, C}), (A, 4, 2, {A, B}), (None, 4, 2, {A, B})]
    for turn, (adapter, loads, evictions, resident) in enumerate(turns):
        ids, tokens, _, _, errors = run(engine, [(prompt, adapter, 1)], MAX_TOKENS)
        assert not errors and tokens[ids[0]] == oracle(lora_setup, adapter, prompt, MAX_TOKENS), f"turn {turn} ({adapter})"
        assert lora(engine) == {"loads": loads, "evictions": evictions, "failures": 0}, (
            f"turn {turn}: after running {[t[0] for t in turns[: turn + 1]]} with 2 slots")
        assert set(engine.lora.stats()["resident"]) == resident, f"turn {turn}: resident adapters"
    assert engine.lora.stats()["requests"] == {A: 2, B: 2, C: 1}


def test_an_adapter_in_use_is_never_evicted_a_request_waits_for_a_slot(lora_setup):
    engine = make_engine(lora_setup, [A, B, C], max_loras=2)
    prompts = dict(zip([A, B, C], random_prompts([6, 7, 8], seed=8)))
    lengths = {A: 12, B: 24, C: MAX_TOKENS}
    tokens, first, last, clock = defaultdict(list), {}, {}, itertools.count()

    def step(times: int) -> None:
        for _ in range(times):
            now = next(clock)
            for event in engine.step():
                assert event.error is None, event.error
                tokens[event.request_id].append(event.token_id)
                first.setdefault(event.request_id, now)
                last[event.request_id] = now

    for name in (A, B):
        engine.add_request(prompts[name], SamplingParams(max_tokens=lengths[name], ignore_eos=True, adapter=name), request_id=name)
    while len(tokens) < 2:  # both loaded (two slots) and running
        step(1)
    engine.add_request(prompts[C], SamplingParams(max_tokens=lengths[C], ignore_eos=True, adapter=C), request_id=C)
    step(3)
    assert engine.lora.stats()["waiting_for_adapter"] == 1 and C not in tokens, "C waits while both slots' adapters run"
    for _ in range(200):
        if not engine.has_unfinished():
            break
        step(1)
    assert not engine.has_unfinished()
    for name in (A, B, C):
        assert tokens[name] == oracle(lora_setup, name, prompts[name], lengths[name]), f"{name}'s tokens (its adapter evicted while it ran?)"
    assert lora(engine) == {"loads": 3, "evictions": 1, "failures": 0}
    assert first[C] > last[A], "C started only after A's last token freed A's slot"
    assert last[B] > first[C], "B ran on beside C"
    assert set(engine.lora.stats()["resident"]) == {B, C}


def test_a_failed_load_ends_its_requests_alone_and_gives_every_block_back(lora_setup, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(lora_setup.adapters[C], broken)
    engine = make_engine(lora_setup, {A: str(lora_setup.adapters[A]), "broken": str(broken)}, max_loras=2,
                         enable_prefix_caching=True)
    (broken / "adapter_model.safetensors").unlink()  # removed after the engine checked it at start
    prompts = random_prompts([9, 10, 11, 12], seed=9)
    requests = [(prompts[0], A, 1), (prompts[1], "broken", 2), (prompts[2], None, 1), (prompts[3], "broken", 1)]
    ids, tokens, _, _, errors = run(engine, requests, MAX_TOKENS)
    assert set(errors) == {ids[1], ids[3]}, "the two requests of the broken adapter fail, nothing else"
    for rid in (ids[1], ids[3]):
        assert isinstance(errors[rid], RequestFailedError)
        assert str(errors[rid]).startswith("adapter 'broken': ") and "adapter_model.safetensors" in str(errors[rid])
    assert tokens[ids[0]] == oracle(lora_setup, A, prompts[0], MAX_TOKENS)
    assert tokens[ids[2]] == oracle(lora_setup, None, prompts[2], MAX_TOKENS)
    assert lora(engine) == {"loads": 1, "evictions": 0, "failures": 1}
    assert engine.stats["request_blocks"] == 0 and engine.lora.stats()["waiting_for_adapter"] == 0
    engine.memory.check_integrity()
    ids, tokens, _, _, errors = run(engine, [(prompts[0], A, 1)], MAX_TOKENS)  # the engine serves on
    assert not errors and tokens[ids[0]] == oracle(lora_setup, A, prompts[0], MAX_TOKENS)


def test_a_request_aborted_while_its_adapter_loads_leaves_nothing_behind(lora_setup):
    engine = make_engine(lora_setup, [A, B], max_loras=1)
    prompt = random_prompts([7], seed=10)[0]
    engine.add_request(prompt, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, n=2, adapter=B), request_id="x")
    assert engine.has_unfinished(), "a request waiting for its adapter is work"
    assert engine.abort("x") and not engine.has_unfinished()
    assert engine.lora.stats()["waiting_for_adapter"] == 0 and engine.stats["request_blocks"] == 0
    engine.add_request(prompt, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, adapter=B), request_id="x")
    _, tokens, _, _, errors = run(engine, [], MAX_TOKENS)
    assert not errors and tokens["x"] == oracle(lora_setup, B, prompt, MAX_TOKENS), "the id serves a new request"


@pytest.fixture(scope="module")
def base_with_tokenizer(lora_setup, tmp_path_factory):
    """The tiny base model's folder with a byte-level tokenizer of its 256 tokens (InferenceEngine needs one)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("lora-base-tokenizer") / "base"
    shutil.copytree(lora_setup.base_dir, folder)
    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer, tokenizer.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer).save_pretrained(folder)
    return folder


def test_the_inference_engine_serves_adapters_by_name_and_survives_a_failed_load(lora_setup, base_with_tokenizer, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(lora_setup.adapters[B], broken)
    config = EngineConfig(num_blocks=128, block_size=4)
    with InferenceEngine(str(base_with_tokenizer), config, lora_adapters={A: str(lora_setup.adapters[A]), "broken": str(broken)},
                         max_lora_rank=8, max_loras=1) as engine:
        assert engine.adapter_names() == [A, "broken"]
        shutil.rmtree(broken)  # gone since the engine checked it
        text = "hello adapters"
        prompt = engine.encode(text)
        result = engine.generate(text, adapter=A, max_tokens=MAX_TOKENS, ignore_eos=True)
        assert result.token_ids == oracle(lora_setup, A, prompt, MAX_TOKENS)
        with pytest.raises(RequestFailedError, match=r"^adapter 'broken': .*not a directory"):
            engine.generate(text, adapter="broken", max_tokens=MAX_TOKENS)
        with pytest.raises(InvalidRequestError, match=r"unknown adapter 'nope'; this engine serves 'all-r8', 'broken'"):
            engine.generate(text, adapter="nope")
        streamed = [item for item in engine.stream(text, adapter=A, max_tokens=MAX_TOKENS, ignore_eos=True)][-1]
        assert streamed.token_ids == result.token_ids
        assert engine.generate(text, max_tokens=MAX_TOKENS, ignore_eos=True).token_ids == oracle(lora_setup, None, prompt, MAX_TOKENS)
        stats = engine.get_stats()
        assert stats["lora"]["loads"] == 1 and stats["lora"]["load_failures"] == 1 and stats["lora"]["resident"] == [A]
        assert stats["lora"]["requests"] == {A: 2, "broken": 1}
        assert stats["lora"]["slot_bytes"] > 0 and stats["lora"]["max_loras"] == 1
        assert stats["kv_blocks"]["held_by_requests"] == 0 and stats["loop_alive"]
