"""Chapter 4 end to end: the engine with the Triton backend gives the torch backend's greedy tokens.

Paged pools of block sizes 1 and 16, a token budget small enough that a
step mixes decodes with a prefill chunk, and counters that prove both
attention kernels and the fused layer kernels ran.
"""

import os
import subprocess
import sys

import pytest
from kernel_cases import DEVICE
from tiny_models import save_tiny_model, transformers_greedy

from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.model import SamplingParams, load_model

pytestmark = [pytest.mark.task(t) for t in ("4.1", "4.2", "4.4")]
PROMPTS = [list(range(1, 18)), [5, 6, 7], list(range(30, 60))]
MAX_TOKENS = 6


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-qwen3")
    hf_model = save_tiny_model("qwen3", path)  # GQA 4:2, head dim 24, q/k norms
    return path, [transformers_greedy(hf_model, p, MAX_TOKENS) for p in PROMPTS]


def run_engine(path, backend: str, block_size: int):
    model = load_model(path, device=DEVICE)
    config = EngineConfig(block_size=block_size, num_blocks=512 // block_size, max_num_batched_tokens=24,
                          enable_prefix_caching=False, attention_backend=backend)
    engine = LLMEngine(model, config)
    ids = [engine.add_request(p, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)) for p in PROMPTS]
    steps = []  # the query lengths of every step the backend saw
    forward = model.backend.forward

    def spy(q, k, v, k_cache, v_cache, meta, scale):
        if not steps or steps[-1] is not meta.query_lens:
            steps.append(meta.query_lens)
        return forward(q, k, v, k_cache, v_cache, meta, scale)

    model.backend.forward = spy
    tokens = {i: [] for i in ids}
    while engine.has_unfinished():
        for event in engine.step():
            tokens[event.request_id].append(event.token_id)
    assert engine.memory.num_free_blocks == engine.memory.num_blocks
    assert any(1 in lens and max(lens) > 1 for lens in steps), "a step mixed decodes with a prefill chunk"
    return [tokens[i] for i in ids], model


@pytest.mark.parametrize("block_size", [1, 16])
def test_triton_backend_greedy_tokens_equal_torch_and_transformers(tiny, block_size):
    path, oracle = tiny
    triton_tokens, model = run_engine(path, "triton", block_size)
    torch_tokens, _ = run_engine(path, "torch", block_size)
    assert triton_tokens == torch_tokens == oracle
    assert model.backend.launches["decode"] > 0 and model.backend.launches["extend"] > 0
    calls = model.ops.calls
    assert calls["rms_norm"] > 0 and calls["rotary"] > 0 and calls["swiglu"] > 0, "the fused layer kernels ran"


LOAD_THEN_RUN = """
import sys
from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.backends.choose import prepare_backend
from miniyaie.model import SamplingParams, load_model
prepare_backend("triton", "cpu")  # what the CLI does before loading
engine = LLMEngine(load_model(sys.argv[1]), EngineConfig(block_size=4, num_blocks=16, attention_backend="triton"))
rid = engine.add_request([5, 6, 7], SamplingParams(max_tokens=3, ignore_eos=True))
tokens = []
while engine.has_unfinished():
    tokens += [e.token_id for e in engine.step()]
print(tokens)
"""


@pytest.mark.skipif(DEVICE != "cpu", reason="the CPU machine's path; with a GPU the backend runs compiled (the test above)")
def test_triton_backend_on_cpu_without_triton_interpret_in_the_environment(tiny):
    """The CLI's path: nothing set TRITON_INTERPRET, and loading a model imports triton (transformers does)."""
    path, oracle = tiny
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", LOAD_THEN_RUN, str(path)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == str(oracle[1][:3])


@pytest.mark.ungraded  # checks the CLI, not a kernel
def test_cli_refuses_an_unknown_backend_clearly(tiny):
    from cli_helpers import assert_clear_error, miniyaie

    assert_clear_error(miniyaie("generate", "x", "--model", str(tiny[0]), "--attention-backend", "cuda-magic"), "attention_backend")
