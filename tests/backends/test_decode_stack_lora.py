"""The CPU decode stack with LoRA adapters (backends/cpu/decode_stack_lora.py): each linear's deltas added in C++.

Oracle: the same engine with the stack off (`decode_graphs="off"`), whose wrapped projections add the deltas
layer by layer with the same kernel (chapter 11's engine tests hold that path to peft's merged models). Mixed
batches of several adapters and none must give the same greedy tokens through the stack; a request without
an adapter must get the base model's tokens; the stack's counters must show the LoRA steps ran in it.
"""

import sys
from pathlib import Path

import pytest

from miniyaie.backends.cpu import kernels, lora_delta
from miniyaie.backends.cpu.decode_stack import CpuDecodeStack
from miniyaie.engine import EngineConfig, LLMEngine, SamplingParams
from miniyaie.model import load_model
from miniyaie.quant import quantize_model

sys.path.append(str(Path(__file__).resolve().parents[1] / "ch11_lora"))
from lora_models import ADAPTERS, save_peft_adapter, save_tiny_llama  # noqa: E402

pytestmark = [pytest.mark.ungraded,  # provided code
              pytest.mark.skipif(kernels.load() is None, reason="needs the C++ kernels (a compiler)")]

NAMES = ["all-r8", "qv-r2", "mlp-r4-rslora", "o-down-r1"]
ADAPTER_OF_PROMPT = ["all-r8", None, "qv-r2", "all-r8", "mlp-r4-rslora", None, "o-down-r1", "qv-r2"]
PROMPTS = [[3, 1, 4, 1, 5], [9, 2, 6], list(range(20, 60)), [7] * 9, [11, 12], list(range(100, 117)), [5] * 4, [1, 2, 3]]
GREEDY = SamplingParams(max_tokens=12, ignore_eos=True)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stack-lora")
    base = save_tiny_llama(folder / "base")
    paths = {}
    for seed, name in enumerate(NAMES):
        paths[name] = str(folder / name)
        save_peft_adapter(base, folder / name, seed + 1, **ADAPTERS[name])
    return folder / "base", paths


def engine_for(setup, mode: str, adapters: bool = True) -> LLMEngine:
    base_dir, paths = setup
    model = load_model(base_dir)
    quantize_model(model, "int4")
    config = EngineConfig(block_size=4, num_blocks=128, max_lora_rank=8, max_loras=len(NAMES),
                          lora_adapters=paths if adapters else {})
    return LLMEngine(model, config, decode_graphs=mode)


def generate(engine: LLMEngine, adapters=ADAPTER_OF_PROMPT) -> list[list[int]]:
    return [o.token_ids for o in engine.generate(PROMPTS, GREEDY, adapter=adapters)]


def test_mixed_adapter_decode_steps_run_in_the_stack_with_the_layers_tokens(setup):
    # float32 K/V: with a bfloat16 cache the two paths' rounding differences became a near-tie once in five runs
    layers = generate(engine_for(setup, "off"))
    engine = engine_for(setup, "auto")
    stack = engine.runner.decode_graphs
    assert isinstance(stack, CpuDecodeStack), "auto on the cpu backend, weights in blocks, adapters: the decode stack"
    assert engine.lora.decode_stack_refused is None, engine.lora.decode_stack_refused
    # adapters load off the engine's step: while they load, the base requests step alone (a step without adapter
    # rows). The first run makes all four resident; the second run's counters are the ones checked.
    assert generate(engine) == layers, "the stack's tokens differ from the layers' (first run, adapters loading)"
    before = dict(stack.counters)
    stacked = generate(engine)
    for i, (ours, theirs) in enumerate(zip(stacked, layers)):
        assert ours == theirs, f"prompt {i} (adapter {ADAPTER_OF_PROMPT[i]}): the stack's tokens differ from the layers'"
    counters = {key: stack.counters[key] - before[key] for key in before}
    assert counters["lora_steps"] >= GREEDY.max_tokens - 1 and counters["lora_steps"] == counters["steps"], (
        f"every decode step (each with adapter rows) ran in the stack: {counters}")
    assert counters["rows"] > counters["lora_rows"] > counters["lora_steps"], (
        f"several adapter rows a step, and rows without an adapter beside them: {counters}")
    plain = engine_for(setup, "auto", adapters=False)
    base = [o.token_ids for o in plain.generate(PROMPTS, GREEDY)]
    for i, adapter in enumerate(ADAPTER_OF_PROMPT):
        if adapter is None:
            assert stacked[i] == base[i], f"prompt {i} has no adapter: in a mixed step it must get the base model's tokens"
        else:
            assert stacked[i] != base[i], f"prompt {i} under {adapter}: the adapter changed nothing (a test that shows nothing)"


def test_steps_without_adapter_rows_and_steps_the_kernel_may_not_take(setup, monkeypatch):
    engine = engine_for(setup, "auto")
    stack = engine.runner.decode_graphs
    base = [o.token_ids for o in engine_for(setup, "auto", adapters=False).generate(PROMPTS, GREEDY)]
    assert generate(engine, adapters=None) == base, "no request with an adapter: the base model's tokens"
    assert stack.counters["steps"] >= GREEDY.max_tokens - 1 and stack.counters["lora_steps"] == 0, stack.counters
    layers = generate(engine_for(setup, "off"))
    steps, handed_back = stack.counters["steps"], stack.counters["handed_back"]
    monkeypatch.setenv(lora_delta.ENV, "0")  # the torch path in the layers: the stack must not add deltas itself
    assert generate(engine) == layers
    assert stack.counters["steps"] == steps and stack.counters["handed_back"] >= handed_back + GREEDY.max_tokens - 1, (
        f"with the LoRA kernel off the layers run every step: {stack.counters}")
    monkeypatch.delenv(lora_delta.ENV)
    assert generate(engine) == layers and stack.counters["lora_steps"] > 0, "the kernel back on: back in the stack"


def test_graphs_other_than_the_cpu_stack_stay_off_with_adapters(setup):
    assert engine_for(setup, "eager").runner.decode_graphs is None, "the recorded-graph path pads rows: LoRA rows would not fit"
    assert isinstance(engine_for(setup, "cpu").runner.decode_graphs, CpuDecodeStack)


def test_with_the_kernel_off_at_start_the_stack_refuses_the_adapters_and_the_layers_run_them(setup, monkeypatch):
    layers = generate(engine_for(setup, "off"))
    monkeypatch.setenv(lora_delta.ENV, "0")
    engine = engine_for(setup, "auto")
    assert "kernel" in (engine.lora.decode_stack_refused or ""), "the stack says why it does not take the adapters"
    monkeypatch.delenv(lora_delta.ENV)
    stack = engine.runner.decode_graphs
    assert generate(engine) == layers, "a refused stack: every step in the layers, the adapters' tokens"
    assert stack.counters["steps"] == 0 and stack.counters["handed_back"] > 0, stack.counters
