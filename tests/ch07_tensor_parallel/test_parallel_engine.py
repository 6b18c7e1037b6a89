"""Task 7.4 (and 7.1-7.3 through it; the real-checkpoint loading test is 7.3's): the engine on N ranks answers exactly what it answers on one.

The oracle is transformers' greedy generate. Each model runs on thread
ranks with chunked prefill, the prefix cache and a pool small enough to
preempt, and the test checks that those really happened (rank 0's counters).
"""

import pytest
import torch
from safetensors import safe_open
from tiny_models import transformers_greedy

from miniyaie.distributed import (
    TensorParallelError, ThreadRanks, attach_engine, load_rank_model, serve_as_worker, weight_slice,
)
from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.engine import SamplingParams as EngineSamplingParams
from miniyaie.model import SamplingParams
from miniyaie.model.loader import read_config

MAX_TOKENS = 12
SHARED = list(range(40, 61))  # a 21-token prefix shared by the first prompts
PROMPTS = [SHARED + [5, 6], SHARED + [7], SHARED + [9, 8, 7], list(range(100, 131)), [3, 1, 4, 1, 5, 9, 2, 6]]


def run_engine(path, tp: int, config: EngineConfig, prompts):
    """Greedy tokens of every prompt through an LLMEngine on `tp` thread ranks, and rank 0's counters."""

    def rank(group):
        model = load_rank_model(path, group)
        if group.rank != 0:
            return serve_as_worker(group, model)
        engine = LLMEngine(model, config)
        if tp > 1:
            attach_engine(engine, group, "auto")
        try:
            ids = [engine.add_request(p, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)) for p in prompts]
            tokens = {rid: [] for rid in ids}
            for _ in range(500):
                if not engine.has_unfinished():
                    break
                for event in engine.step():
                    tokens[event.request_id].append(event.token_id)
            assert not engine.has_unfinished(), "the workload did not finish in 500 steps"
            return [tokens[rid] for rid in ids], dict(engine.stats), engine.num_request_blocks
        finally:
            if tp > 1:
                group.broadcast_object(None)  # the workers' loops end

    return ThreadRanks(tp, timeout_s=60).run(rank)


@pytest.mark.task("7.4")
@pytest.mark.parametrize("name,tp", [("llama-kv1", 2), ("qwen2-kv2", 2), ("qwen3-kv4", 2), ("llama-kv1", 4), ("qwen2-kv2", 4)])
def test_greedy_tokens_on_n_ranks_equal_transformers(tiny_checkpoint, name, tp):
    path, hf_model = tiny_checkpoint(name)
    # 8-token steps (chunked prefill), a shared prefix (cache hits), 14 blocks of 4 (preemptions).
    config = EngineConfig(block_size=4, num_blocks=14, max_num_batched_tokens=8, max_num_seqs=4)
    assert max(map(len, PROMPTS)) > config.max_num_batched_tokens, "the longest prompt must need several prefill chunks"
    results = run_engine(path, tp, config, PROMPTS)
    tokens, stats, held = results[0]
    one_tokens, one_stats, _ = run_engine(path, 1, config, PROMPTS)[0]
    for prompt, got, one in zip(PROMPTS, tokens, one_tokens):
        want = transformers_greedy(hf_model, prompt, MAX_TOKENS)
        assert got == want, f"{name} on {tp} ranks, prompt of {len(prompt)} tokens: got {got}, transformers {want}"
        assert one == want, f"{name} on 1 rank, prompt of {len(prompt)} tokens: got {one}, transformers {want}"
    assert stats["cached_tokens"] > 0 and stats["num_preemptions"] > 0, (
        f"the workload should hit the prefix cache and preempt (stats {stats}): the test lost its teeth")
    assert stats == one_stats, (
        f"the scheduler is rank 0's alone and unchanged: {tp} ranks should schedule exactly as one does "
        f"(steps, cache hits, preemptions, blocks), got {stats}, one rank {one_stats}")
    assert held == 0, f"{held} blocks still held by requests after they all finished"
    if tp > 1:
        steps = results[1:]
        assert all(s == stats["steps"] for s in steps), f"rank 0 ran {stats['steps']} steps, the workers replayed {steps}"


@pytest.mark.task("7.4")
def test_copy_on_write_copies_reach_every_rank(tiny_checkpoint):
    """n = 3 completions share their prompt's last, partly filled block: each write copies it first, on every rank."""
    path, hf_model = tiny_checkpoint("qwen2-kv2")
    prompt = [11, 12, 13, 14, 15, 16]  # 6 tokens in blocks of 4: the second block is shared and partly filled

    def rank(group):
        model = load_rank_model(path, group)
        if group.rank != 0:
            return serve_as_worker(group, model)
        engine = LLMEngine(model, EngineConfig(block_size=4, num_blocks=32, enable_prefix_caching=False))
        attach_engine(engine, group, "auto")
        try:
            rid = engine.add_request(prompt, EngineSamplingParams(max_tokens=6, ignore_eos=True, n=3, temperature=0.0))
            out = {}
            while engine.has_unfinished():
                for event in engine.step():
                    out.setdefault(event.request_id, []).append(event.token_id)
            return rid, out
        finally:
            group.broadcast_object(None)

    rid, out = ThreadRanks(2, timeout_s=60).run(rank)[0]
    want = transformers_greedy(hf_model, prompt, 6)
    assert len(out) == 3 and all(tokens == want for tokens in out.values()), (
        f"three greedy completions should all equal transformers' {want}, got {out} "
        f"(a worker that never copies the shared block, or copies it after the step's forward, reads another completion's K/V)")


def merged_copy(path, out):
    """`path`'s checkpoint rewritten as fused checkpoints store it: qkv_proj and gate_up_proj, in two files."""
    import json
    import shutil

    from safetensors.torch import save_file

    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        state = {key: f.get_tensor(key) for key in f.keys()}
    for key in [k for k in state if k.endswith("q_proj.weight") or k.endswith("q_proj.bias")]:
        stem, kind = key.rsplit(".q_proj.", 1)
        state[f"{stem}.qkv_proj.{kind}"] = torch.cat([state.pop(f"{stem}.{p}_proj.{kind}") for p in "qkv"])
    for key in [k for k in state if k.endswith("gate_proj.weight")]:
        stem = key.rsplit(".gate_proj.", 1)[0]
        state[f"{stem}.gate_up_proj.weight"] = torch.cat([state.pop(f"{stem}.{p}_proj.weight") for p in ("gate", "up")])
    out.mkdir()
    shutil.copy(path / "config.json", out / "config.json")
    keys = sorted(state)
    files = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    for file, names in files.items():
        save_file({k: state[k].contiguous() for k in names}, str(out / file))
    weight_map = {k: file for file, names in files.items() for k in names}
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return out


@pytest.mark.task("7.3")
@pytest.mark.parametrize("name,merged", [("llama-kv1", False), ("qwen2-kv2", False), ("qwen2-kv2", True)])
def test_each_rank_loads_only_its_slices_of_the_checkpoint(tiny_checkpoint, tmp_path, name, merged):
    """A real checkpoint directory (safetensors), as saved or merged into qkv_proj / gate_up_proj over two files."""
    path, _ = tiny_checkpoint(name)
    config = read_config(path)
    source = merged_copy(path, tmp_path / "merged") if merged else path
    models = ThreadRanks(2).run(lambda group: load_rank_model(source, group))
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        for rank, model in enumerate(models):
            params = dict(model.named_parameters())
            for key in f.keys():
                if key not in params:
                    continue
                full, part = f.get_tensor(key), weight_slice(key, config, rank, 2)
                want = full if part is None else full.narrow(part[0], part[1], part[2] - part[1])
                assert torch.equal(params[key], want), (
                    f"rank {rank}: {key} is not its slice {part} of the checkpoint"
                    + (" (read from the merged qkv_proj / gate_up_proj, two files)" if merged else ""))
            sharded = params["model.layers.0.mlp.gate_proj.weight"].numel()
            assert sharded * 2 == config.intermediate_size * config.hidden_size, f"rank {rank} holds more than half of gate_proj"


class Counting:
    """A group that counts rank 0's collective calls (and makes them)."""

    def __init__(self, group):
        self.group, self.calls = group, 0

    def __getattr__(self, name):
        attr = getattr(self.group, name)
        if name in ("broadcast_object", "all_reduce", "all_gather_last_dim"):
            def counted(*args, **kwargs):
                self.calls += 1
                return attr(*args, **kwargs)
            return counted
        return attr


@pytest.mark.task("7.4")
def test_a_worker_that_raises_fails_the_step_and_every_later_one(tiny_checkpoint):
    """The worker's third forward raises: rank 0's step raises TensorParallelError, and so does every later step."""
    path, _ = tiny_checkpoint("qwen2-kv2")
    seen = []  # what rank 0's engine saw

    def rank(group):
        model = load_rank_model(path, group)
        if group.rank != 0:
            calls = {"n": 0}
            forward = model.forward

            def failing(*args, **kwargs):
                calls["n"] += 1
                if calls["n"] == 3:
                    raise RuntimeError("rank 1 ran out of memory (planted)")
                return forward(*args, **kwargs)

            model.forward = failing
            return serve_as_worker(group, model)
        engine = LLMEngine(model, EngineConfig(block_size=4, num_blocks=32))
        attach_engine(engine, group, "auto")
        engine.add_request([1, 2, 3, 4], SamplingParams(max_tokens=10, ignore_eos=True))
        errors = []
        try:
            for step in range(4):
                if step == 3:  # after the failure: count what rank 0 still sends
                    engine.runner.group = Counting(engine.runner.group)
                try:
                    engine.step()
                    errors.append(None)
                except Exception as exc:  # noqa: BLE001 -- what each step raised is the result
                    errors.append(exc)
                try:
                    engine.runner.check_health()
                    errors.append("healthy")
                except Exception as exc:  # noqa: BLE001
                    errors.append(exc)
        finally:
            seen.append(errors)
            seen.append(getattr(engine.runner.group, "calls", None))
            group.broadcast_object(None)  # a worker still waiting for steps ends (a dead one broke the barrier: raises)

    try:
        ThreadRanks(2, timeout_s=20).run(rank)
        ended = None
    except RuntimeError as exc:  # run() re-raises the worker's error once all ranks ended
        ended = exc
    errors, calls_after_failure = seen
    step_results, health = errors[0::2], errors[1::2]
    assert step_results[:2] == [None, None] and health[:2] == ["healthy", "healthy"], f"the first two steps should succeed: {errors}"
    for i in (2, 3):
        assert isinstance(step_results[i], TensorParallelError), (
            f"step {i + 1} (the worker failed in step 3) should raise TensorParallelError, got {step_results[i]!r}")
        assert isinstance(health[i], TensorParallelError), (
            f"after the failure check_health should raise TensorParallelError, got {health[i]!r}")
        for what, error in ((f"step {i + 1}", step_results[i]), ("check_health", health[i])):
            assert "tensor-parallel rank failed" in str(error), (
                f"{what}'s TensorParallelError should say 'tensor-parallel rank failed' and name the failure "
                f"(the engine hands that message to the requests), got {str(error)!r}")
    assert calls_after_failure == 0, (
        f"step 4 came after a failed step: it must raise at once, without a message to any rank; "
        f"rank 0 made {calls_after_failure} collective call(s)")
    assert ended is not None and "planted" in str(ended), (
        f"the worker's own error should end the run once every rank stopped, got {ended!r}")


@pytest.mark.task("7.4")
def test_a_worker_takes_rank_0s_backend_and_ends_when_rank_0_gives_up(tiny_checkpoint):
    """A worker runs the backend rank 0 names; a rank 0 that sends None instead of a setup ends it with 0 steps."""
    from miniyaie.backends.choose import make_attention_backend

    path, _ = tiny_checkpoint("qwen2-kv2")

    def rank(group):
        model = load_rank_model(path, group)
        if group.rank != 0:
            steps = serve_as_worker(group, model)
            return steps, type(model.backend).__name__
        engine = LLMEngine(model, EngineConfig(block_size=4, num_blocks=16, attention_backend="torch"))
        attach_engine(engine, group, "torch")
        group.broadcast_object(None)
        return None

    _, (steps, backend) = ThreadRanks(2, timeout_s=30).run(rank)
    want = type(make_attention_backend("torch", "cpu")).__name__
    assert (steps, backend) == (0, want), (
        f"a worker told to use the 'torch' backend should run {want} and replay 0 steps, got {backend}, {steps}")
    gave_up = ThreadRanks(2, timeout_s=30).run(
        lambda group: group.broadcast_object(None) if group.rank == 0 else serve_as_worker(group, model=None))
    assert gave_up == [None, 0], f"rank 0 gave up before sending a setup: the worker should return 0, got {gave_up[1]!r}"
