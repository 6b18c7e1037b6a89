"""The decode path that CUDA graphs replay, on CPU: static buffers, padding to a ladder size, scratch rows.

`LLMEngine(..., decode_graphs="eager")` runs everything that path does except
torch.cuda.CUDAGraph itself: each "replay" runs the same function over the
same static buffers. Greedy tokens must equal transformers' and the eager
engine's; padded rows must leave every live K/V slot alone; merged q/k/v and
gate/up projections must compute what the separate ones do.
"""

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st
from tiny_models import save_tiny_model, transformers_greedy

from miniyaie.backends.cuda_graphs import decode_graphs_mode
from miniyaie.backends.merged_projections import MergedProjectionOps, merge_projections
from miniyaie.backends.static_inputs import StaticDecodeInputs, batch_ladder, padded_size
from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.model import AttentionMetadata, SamplingParams, load_model

pytestmark = pytest.mark.ungraded  # provided machinery (miniyaie/backends/cuda_graphs.py and its modules), not a learner's task
PROMPTS = [list(range(1, 18)), [5, 6, 7], list(range(30, 60)), [9] * 11, [100, 3]]
MAX_TOKENS = 7


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-qwen2")
    hf_model = save_tiny_model("qwen2", path)  # GQA 4:2, q/k/v biases, tied embeddings
    return path, [transformers_greedy(hf_model, p, MAX_TOKENS) for p in PROMPTS]


def engine_for(path, decode_graphs: str, **config) -> LLMEngine:
    settings_ = dict(block_size=4, num_blocks=64, enable_prefix_caching=False, attention_backend="torch", max_num_seqs=8)
    return LLMEngine(load_model(path), EngineConfig(**{**settings_, **config}), decode_graphs=decode_graphs)


def generate(engine: LLMEngine, prompts, max_tokens=MAX_TOKENS) -> list[list[int]]:
    return [o.token_ids for o in engine.generate(prompts, SamplingParams(max_tokens=max_tokens, ignore_eos=True))]


@given(st.integers(1, 64), st.integers(1, 64))
@example(1, 1).via("batch 1 needs no padding")
@example(33, 64).via("past a power of two: the next step of 8")
@example(65, 64).via("past the ladder: eager")
@example(64, 64).via("the cap itself")
@example(3, 5).via("a cap off the ladder is its last size")
def test_padded_size_is_the_smallest_ladder_size_that_holds_the_batch(rows, cap):
    ladder = batch_ladder(cap)
    assert ladder == sorted(set(ladder)) and ladder[0] == 1 and ladder[-1] == cap
    size = padded_size(rows, ladder)
    if rows > cap:
        assert size is None
    else:
        assert size >= rows and size in ladder and all(s < rows for s in ladder if s < size)


def test_fill_pads_rows_and_forgets_a_bigger_earlier_step():
    inputs = StaticDecodeInputs(max_rows=8, max_blocks_per_seq=4, block_size=4, scratch_block=9, device="cpu")

    def step(n, width):
        meta = AttentionMetadata(query_lens=[1] * n, seq_lens=[3 + i for i in range(n)],
                                 slot_mapping=torch.arange(n) + 100, block_tables=torch.arange(n * width).view(n, width),
                                 block_size=4)
        inputs.fill(torch.arange(n) + 50, torch.arange(n) + 2, meta, padded_size(n, [1, 2, 4, 8]))
        return meta

    step(7, 3)
    meta = step(2, 1)
    m = inputs.metadata(2, num_splits=1)
    assert m.seq_lens_tensor.tolist() == [3, 4] and m.block_tables[:, 0].tolist() == meta.block_tables[:, 0].tolist()
    assert (m.block_tables[:, 1:] == 9).all(), "columns past the step's tables point at the scratch block"
    assert inputs.slot_mapping[:2].tolist() == [100, 101]
    assert inputs.input_ids[:2].tolist() == [50, 51] and inputs.positions[:2].tolist() == [2, 3]
    with pytest.raises(ValueError, match="cannot pad"):
        inputs.fill(torch.arange(2), torch.arange(2), meta, 1)


def test_greedy_tokens_equal_transformers_and_eager_with_the_static_path(tiny):
    path, oracle = tiny
    engine = engine_for(path, "eager")
    tokens = generate(engine, PROMPTS)
    assert tokens == oracle == generate(engine_for(path, "off"), PROMPTS)
    graphs = engine.runner.decode_graphs
    assert graphs.counters["replays"] >= MAX_TOKENS - 1, "decode steps ran through the static buffers"
    assert graphs.counters["padded_rows"] > 0, "five requests were padded to eight"
    assert engine.model.backend.static_calls > 0 and engine.model.ops.merged_calls["project"] > 0
    assert engine.memory.num_free_blocks == engine.memory.num_blocks


def test_fewer_rows_after_more_give_the_eager_tokens(tiny):
    """Five requests decode together (padded to 8), then three (padded to 4), then one: no old row leaks in."""
    path, _ = tiny
    engine, eager = engine_for(path, "eager"), engine_for(path, "off")
    for prompts, max_tokens in ((PROMPTS, MAX_TOKENS), (PROMPTS[2:], 12), ([PROMPTS[0]], 9)):
        assert generate(engine, prompts, max_tokens) == generate(eager, prompts, max_tokens)


def test_padded_rows_never_touch_live_kv(tiny):
    """Every pool block but the scratch block holds what the eager engine wrote there; no other slot changes."""
    path, _ = tiny
    static, eager = engine_for(path, "eager"), engine_for(path, "off")
    for engine in (static, eager):
        for pool in (engine.pool.k, engine.pool.v):
            for layer in pool:
                layer.fill_(7.0)
        generate(engine, PROMPTS[:3])
    scratch = static.memory.num_blocks
    assert static.pool.k[0].shape[0] == eager.pool.k[0].shape[0] + 4, "one scratch block of 4 slots past the memory's"
    live = slice(0, scratch * 4)
    for a, b in zip([*static.pool.k, *static.pool.v], [*eager.pool.k, *eager.pool.v]):
        a, b = a[live], b[live]
        unwritten = (b == 7.0).flatten(1).all(dim=1)
        assert unwritten.any() and (a[unwritten] == 7.0).all(), "slots no request wrote are untouched"
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)  # written slots: the requests' K/V (merged matmuls round apart)
    assert static.runner.decode_graphs.counters["padded_rows"] > 0


def test_prefill_and_mixed_steps_run_eagerly(tiny):
    path, oracle = tiny
    engine = engine_for(path, "eager", max_num_batched_tokens=20, max_num_seqs=4)  # ladder 1, 2, 4
    assert generate(engine, PROMPTS) == oracle
    counters = engine.runner.decode_graphs.counters
    assert counters["eager_steps"] > 0 and counters["replays"] > 0


def test_speculative_verify_steps_run_eagerly_and_decode_steps_still_replay(tiny):
    """A step that verifies drafts has several query rows per request: the static decode path must decline it
    (its buffers hold one row per request) and every token stay the eager engine's."""
    path, oracle = tiny
    prompts = PROMPTS + [[4, 5, 6, 7] * 4]  # a loop the n-gram proposer finds: drafts accepted
    want = generate(engine_for(path, "off"), prompts, 12)
    spec = dict(speculative="ngram", num_speculative_tokens=3, max_speculative_step_tokens=64)
    engine = engine_for(path, "eager", **spec)
    assert generate(engine, prompts, 12) == want
    graphs = engine.runner.decode_graphs
    assert engine.counters["verified_steps"] > 0 and graphs.counters["eager_steps"] >= 1
    assert graphs.counters["replays"] > 0, "steps without drafts (a request with none found) still replay"
    assert engine.memory.num_free_blocks == engine.memory.num_blocks


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_merged_projections_equal_the_separate_ones(tmp_path, kind):
    save_tiny_model(kind, tmp_path)
    model = load_model(tmp_path)
    x = torch.randn(5, model.config.hidden_size)
    attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    separate = [p(x) for p in (attn.q_proj, attn.k_proj, attn.v_proj)]
    mlp_separate = model.ops.swiglu(x, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
    assert merge_projections(model) == 2 * model.config.num_layers
    ops = MergedProjectionOps(model.ops)
    for got, want in zip(ops.project(x, attn.q_proj, attn.k_proj, attn.v_proj), separate):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ops.swiglu(x, mlp.gate_proj, mlp.up_proj, mlp.down_proj), mlp_separate, rtol=1e-5, atol=1e-6)
    assert ops.merged_calls == {"project": 1, "swiglu": 1}
    for got, want in zip([attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)], separate):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)  # the layers' own weights: views, same values


def test_enforce_eager_must_be_a_bool_and_graphs_need_cuda():
    with pytest.raises(ValueError, match="enforce_eager"):
        EngineConfig(enforce_eager="yes")
    with pytest.raises(ValueError, match="decode_graphs"):
        decode_graphs_mode("sometimes", EngineConfig(), "cpu")
    assert decode_graphs_mode("auto", EngineConfig(attention_backend="triton"), "cpu") == "off", "graphs need CUDA"



def test_a_config_file_can_turn_graphs_off(tmp_path):
    from miniyaie.serving.config_file import ConfigError, load_settings

    good, bad = tmp_path / "eager.yaml", tmp_path / "bad.yaml"
    good.write_text("engine:\n  enforce_eager: true\n")
    bad.write_text("engine:\n  enforce_eager: maybe\n")
    assert load_settings(good).engine.enforce_eager is True
    with pytest.raises(ConfigError, match="enforce_eager"):
        load_settings(bad)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="recording CUDA graphs needs a GPU")
def test_recorded_cuda_graphs_give_the_eager_tokens(tiny):
    """On a GPU with the triton backend the engine records graphs by default and replays decode steps."""
    path, oracle = tiny
    settings_ = dict(block_size=16, num_blocks=32, enable_prefix_caching=False, attention_backend="triton", max_num_seqs=8)
    model = load_model(path, device="cuda")
    graphed = LLMEngine(model, EngineConfig(**settings_))
    tokens = generate(graphed, PROMPTS)
    eager = generate(LLMEngine(model, EngineConfig(**settings_, enforce_eager=True)), PROMPTS)
    assert tokens == eager == oracle
    graphs = graphed.runner.decode_graphs
    assert graphs.replay_kind == "cuda" and graphs.counters["replays"] >= MAX_TOKENS - 1 and graphs.memory_bytes > 0
    assert graphed.memory.num_free_blocks == graphed.memory.num_blocks


@pytest.mark.parametrize("adder", ["add_sampling_args", "add_scheduling_args"])  # generate/chat; serve/bench offline
def test_the_cli_flag_enforce_eager_reaches_the_engine_config(adder):
    import argparse

    from miniyaie.cli import args as cli_args

    parser = argparse.ArgumentParser()
    getattr(cli_args, adder)(*([parser, 8] if adder == "add_sampling_args" else [parser]))
    assert EngineConfig(**cli_args.scheduling_overrides(parser.parse_args(["--enforce-eager"]))).enforce_eager is True
    assert "enforce_eager" not in cli_args.scheduling_overrides(parser.parse_args([])), "left out: the config's value"
