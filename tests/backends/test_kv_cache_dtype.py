"""A K/V pool narrower than the model (kv_cache_dtype="bfloat16"): twice the tokens in the same bytes, read by
the C++ kernels and the batched torch path alike, refused where a backend cannot read it (ungraded: provided code).

bfloat16 K/V change the model's outputs a little (each key and value rounded to 8 bits of mantissa); what the
two backends must agree on is the arithmetic over the same stored values: the C++ kernels widen each row as
they read it, the torch path widens the gathered rows, both then compute in float32.
"""

import pytest
import torch
from tiny_models import save_tiny_model

from miniyaie.backends.cpu.paged_attention import PagedCpuAttentionBackend
from miniyaie.cli.args import Parser, UsageError, add_scheduling_args, scheduling_overrides
from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.model import SamplingParams, load_model

pytestmark = pytest.mark.ungraded
PROMPTS = [[(7 * i + 3 * j) % 50 + 1 for j in range(n)] for i, n in enumerate([5, 23, 1, 40, 9, 17])]


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-head-64")
    save_tiny_model("llama", path, hidden_size=256, num_attention_heads=4, num_key_value_heads=2)  # head_dim 64
    return path


def run(path, backend: str, kv_cache_dtype: str):
    model = load_model(path)
    config = EngineConfig(block_size=16, max_num_batched_tokens=24, kv_cache_bytes=2**22, attention_backend=backend,
                          kv_cache_dtype=kv_cache_dtype)
    engine = LLMEngine(model, config)
    outputs = engine.generate(PROMPTS, SamplingParams(max_tokens=8, ignore_eos=True))
    return engine, model, [o.token_ids for o in outputs]


def test_a_bfloat16_pool_holds_twice_the_tokens_and_the_kernels_read_it(tiny_path, monkeypatch):
    wide, _, _ = run(tiny_path, "auto", "auto")
    narrow, model, in_kernels = run(tiny_path, "auto", "bfloat16")
    assert wide.pool.k.dtype == torch.float32 and narrow.pool.k.dtype == torch.bfloat16
    assert narrow.memory.num_blocks == 2 * wide.memory.num_blocks, "the same kv_cache_bytes hold twice the blocks"
    assert isinstance(model.backend, PagedCpuAttentionBackend)
    assert model.backend.decode_rows_in_kernel >= len(PROMPTS) * 7 and model.backend.chunk_rows_in_kernel > 0, (
        "the C++ kernels attended over the bfloat16 pool")
    # The same engine with the kernels declined: every row takes the batched torch path. (Another backend
    # would also change the linears' summation order, and a key that rounds to bfloat16 the other way is a
    # change of 2**-8: enough to flip a near tie of a random tiny model.)
    monkeypatch.setattr(PagedCpuAttentionBackend, "_usable", lambda self, q, k_cache: False)
    _, torch_model, on_torch = run(tiny_path, "auto", "bfloat16")
    assert torch_model.backend.decode_rows_in_kernel == 0
    assert in_kernels == on_torch, "the kernels and the torch path read the same bfloat16 K/V"


def test_backends_that_cannot_read_a_narrower_pool_and_bad_settings_are_refused_in_one_line(tiny_path):
    with pytest.raises(ValueError, match="unknown kv_cache_dtype 'int8'"):
        EngineConfig(kv_cache_dtype="int8")
    with pytest.raises(ValueError, match="one process"):
        EngineConfig(kv_cache_dtype="bfloat16", tensor_parallel_size=2)
    with pytest.raises(ValueError, match="the reference attention backend cannot read it"):
        LLMEngine(load_model(tiny_path), EngineConfig(kv_cache_dtype="bfloat16", attention_backend="reference"))
    engine = LLMEngine(load_model(tiny_path), EngineConfig(kv_cache_dtype="float32", attention_backend="reference"))
    assert engine.pool.k.dtype == torch.float32  # the model's own dtype: any backend


def test_the_flag_reaches_the_engine_config():
    parser = Parser()
    add_scheduling_args(parser)
    args = parser.parse_args(["--kv-cache-dtype", "bfloat16"])
    assert scheduling_overrides(args)["kv_cache_dtype"] == "bfloat16"
    with pytest.raises(UsageError, match="invalid choice: 'int3'"):
        parser.parse_args(["--kv-cache-dtype", "int3"])


def test_the_config_file_sets_the_pool_dtype_and_quantization(tmp_path):
    from miniyaie.serving.config_file import ConfigError, load_settings

    path = tmp_path / "engine.toml"
    path.write_text('[engine]\nkv_cache_dtype = "bfloat16"\nquantization = "int8"\n')
    config = load_settings(path).engine
    assert (config.kv_cache_dtype, config.quantization) == ("bfloat16", "int8")
    path.write_text('[engine]\nkv_cache_dtype = "fp4"\n')
    with pytest.raises(ConfigError, match="unknown kv_cache_dtype 'fp4'"):
        load_settings(path)
