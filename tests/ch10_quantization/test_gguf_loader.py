"""Task 10.4: a GGUF file's blocks put into the model, checked against the float32 model of the same file.

The tests write their own small GGUF files, as llama.cpp's converter does (q and k rows reordered within
each head, Q4_1 and Q8_0 blocks, norms in F32), and give the float32 model exactly the weights the file's
blocks decode to, in the model's row order: the oracle that transformers' GGUF loader is for a real file.
"""

import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from miniyaie.model import SamplingParams, generate, load_model
from miniyaie.quant import QuantizedEmbedding, QuantizedLinear, load_gguf_blocks

sys.path.append(str(Path(__file__).resolve().parents[1] / "ch00_model"))
from tiny_models import save_tiny_model  # noqa: E402

NAMES = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
         "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
Q = gguf.GGMLQuantizationType


def llama_cpp_rows(rows: int, heads: int) -> torch.Tensor:
    """Stored row s of a head holds model row order[s]: 2 i <- i, 2 i + 1 <- i + head_dim / 2."""
    half = rows // heads // 2
    return torch.arange(rows).view(heads, 2, half).transpose(1, 2).reshape(rows)


def write_gguf(model, path: Path, types: dict[str, Q], drop: str | None = None, architecture: str = "llama") -> dict[str, str]:
    """Write the model's weights as llama.cpp would into `path` (q and k rows interleaved for "llama" only), and set
    the model's weights to what the blocks decode to. Returns {GGUF name: type name} of the tensors written."""
    config, writer, written = model.config, gguf.GGUFWriter(str(path), architecture), {}

    def put(name: str, weight: torch.Tensor, kind: Q, heads: int | None = None) -> torch.Tensor:
        stored = weight.detach().float()
        if heads:
            stored = stored[llama_cpp_rows(stored.shape[0], heads)]
        if kind in (Q.F32, Q.F16):
            raw = stored.numpy().astype(np.float32 if kind == Q.F32 else np.float16)
            decoded = torch.from_numpy(raw.astype(np.float32))
        else:
            raw = gguf.quants.quantize(stored.numpy(), kind)
            decoded = torch.from_numpy(gguf.quants.dequantize(raw, kind).reshape(stored.shape))
        if name != drop:
            writer.add_tensor(name, raw, raw_dtype=kind if kind not in (Q.F32, Q.F16) else None)
            written[name] = kind.name
        if heads:
            decoded = decoded[torch.argsort(llama_cpp_rows(stored.shape[0], heads))]
        return decoded

    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            for part in (layer.self_attn, layer.mlp):
                for child, short in NAMES.items():
                    if hasattr(part, child):
                        linear = getattr(part, child)
                        heads = {"attn_q": config.num_heads, "attn_k": config.num_kv_heads}.get(short) if (
                            architecture == "llama") else None
                        kind = types.get(short, types.get(f"{short}.{i}", Q.Q4_1))
                        linear.weight.copy_(put(f"blk.{i}.{short}.weight", linear.weight, kind, heads))
            for norm in ("input_layernorm", "post_attention_layernorm"):
                put(f"blk.{i}.{'attn_norm' if norm == 'input_layernorm' else 'ffn_norm'}.weight",
                    getattr(layer, norm).weight[None], Q.F32)
        model.model.embed_tokens.weight.copy_(put("token_embd.weight", model.model.embed_tokens.weight,
                                                  types.get("token_embd", Q.Q8_0)))
        if not config.tie_word_embeddings:
            model.lm_head.weight.copy_(put("output.weight", model.lm_head.weight, types.get("output", Q.Q8_0)))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return written


def greedy(model, prompts, n=12):
    return [g.token_ids for g in generate(model, prompts, SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True))]


def check_layers(blocks_model, float_model, written: dict[str, str], architecture: str) -> None:
    x = torch.randn(3, float_model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    for i, (ql, fl) in enumerate(zip(blocks_model.model.layers, float_model.model.layers)):
        for part in ("self_attn", "mlp"):
            for child, short in NAMES.items():
                if not hasattr(getattr(fl, part), child):
                    continue
                got, want = getattr(getattr(ql, part), child), getattr(getattr(fl, part), child)
                name = f"blk.{i}.{short}.weight"
                if written[name] in ("F32", "F16"):
                    assert torch.equal(got.weight, want.weight), f"{name} is {written[name]}: its float layer stays"
                    continue
                assert isinstance(got, QuantizedLinear), f"{name} ({written[name]}) must become a QuantizedLinear"
                inputs = x if want.in_features == x.shape[1] else torch.randn(3, want.in_features)
                ok = torch.allclose(got(inputs), want(inputs), rtol=1e-4, atol=1e-4)
                if not ok and want.bias is not None and getattr(got, "bias", None) is None:
                    raise AssertionError(f"layer {i} {child}: its bias is missing (the float32 layer adds one; "
                                         "the blocks replace the weight alone)")
                if not ok and short in ("attn_q", "attn_k"):
                    heads = float_model.config.num_heads if short == "attn_q" else float_model.config.num_kv_heads
                    order = llama_cpp_rows(want.weight.shape[0], heads)
                    decoded = got.qweight.dequantize()
                    if architecture != "llama" and torch.equal(decoded[order], want.weight):
                        wrong = (f"its rows were reordered, but a {architecture} file keeps the model's order: "
                                 "only llama.cpp's llama files interleave each head's rotary halves")
                    elif torch.equal(decoded, want.weight[order]):
                        wrong = "its rows are still in llama.cpp's order (each head's two rotary halves interleaved)"
                    else:
                        wrong = "its rows are in neither the model's order nor llama.cpp's (q has num_heads heads, k num_kv_heads)"
                    raise AssertionError(f"layer {i} {child}: {wrong}")
                assert ok, f"layer {i} {child} ({name}) does not compute what the float32 layer computes"


@pytest.mark.task("10.4")
@pytest.mark.parametrize("kind,types,architecture", [
    ("llama", {}, "llama"),  # GQA, its own head (output.weight), Q4_1 projections, Q8_0 embedding and head
    ("llama-tied-mha", {"attn_v": Q.Q8_0, "attn_output.1": Q.F32}, "llama"),  # a tied head; a projection kept as F32
    ("qwen2", {"token_embd": Q.Q4_1}, "qwen2"),  # q/k/v biases, a tied head over a Q4_1 embedding; rows as they are
])
def test_the_files_blocks_compute_what_the_float32_model_of_the_file_computes(tmp_path, kind, types, architecture):
    save_tiny_model(kind, tmp_path / "hf", seed=3)
    float_model, blocks_model = load_model(tmp_path / "hf"), load_model(tmp_path / "hf")
    written = write_gguf(float_model, tmp_path / "model.gguf", types, architecture=architecture)
    write_gguf(blocks_model, tmp_path / "same.gguf", types, architecture=architecture)  # the same decoded weights
    count = load_gguf_blocks(blocks_model, tmp_path / "model.gguf")
    in_blocks = [n for n, t in written.items() if t not in ("F32", "F16")]
    assert count == len(in_blocks), f"{len(in_blocks)} tensors of the file are blocks ({in_blocks}); returned {count}"
    check_layers(blocks_model, float_model, written, architecture)
    assert isinstance(blocks_model.model.embed_tokens, QuantizedEmbedding), "token_embd.weight: a QuantizedEmbedding"
    ids = torch.tensor([[0, 5, 17, 300]])
    assert torch.equal(blocks_model.model.embed_tokens(ids), float_model.model.embed_tokens(ids)), "the embedding's rows"
    head = blocks_model.lm_head
    assert isinstance(head, QuantizedLinear), "the head reads blocks too"
    if float_model.config.tie_word_embeddings:
        assert head.qweight.codes.data_ptr() == blocks_model.model.embed_tokens.qweight.codes.data_ptr(), (
            "a tied head reads the embedding's blocks: one copy")
    prompts = [[1, 2, 3, 4], [7, 100, 250], list(range(30, 60))]
    assert greedy(blocks_model, prompts) == greedy(float_model, prompts), "greedy tokens differ from the float32 model's"


@pytest.mark.task("10.4")
def test_a_missing_or_unreadable_tensor_is_named(tmp_path):
    save_tiny_model("llama", tmp_path / "hf")
    model = load_model(tmp_path / "hf")
    write_gguf(model, tmp_path / "missing.gguf", {}, drop="blk.1.ffn_up.weight")
    with pytest.raises(ValueError, match=r"blk\.1\.ffn_up\.weight"):
        load_gguf_blocks(load_model(tmp_path / "hf"), tmp_path / "missing.gguf")
    save_tiny_model("llama", tmp_path / "wide", intermediate_size=128)
    with pytest.raises(ValueError, match=r"blk\.0\.ffn_gate\.weight"):  # a file of another model: shapes differ
        load_gguf_blocks(load_model(tmp_path / "wide"), tmp_path / "missing.gguf")
    writer = gguf.GGUFWriter(str(tmp_path / "k_quants.gguf"), "llama")  # a block type without a kernel here (Q4_0)
    for name, tensor in write_all(model).items():
        if name == "blk.0.attn_v.weight":
            writer.add_tensor(name, np.zeros((tensor.shape[0], tensor.shape[1] // 32 * 18), dtype=np.uint8), raw_dtype=Q.Q4_0)
        else:
            writer.add_tensor(name, gguf.quants.quantize(tensor, Q.Q8_0), raw_dtype=Q.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match=r"blk\.0\.attn_v\.weight.*Q4_0|Q4_0.*blk\.0\.attn_v\.weight"):
        load_gguf_blocks(load_model(tmp_path / "hf"), tmp_path / "k_quants.gguf")


def write_all(model) -> dict[str, np.ndarray]:
    """Every tensor the loader reads, by GGUF name, as float32 arrays (rows in any order: only names matter here)."""
    out = {"token_embd.weight": model.model.embed_tokens.weight, "output.weight": model.lm_head.weight}
    for i, layer in enumerate(model.model.layers):
        for part in (layer.self_attn, layer.mlp):
            for child, short in NAMES.items():
                if hasattr(part, child):
                    out[f"blk.{i}.{short}.weight"] = getattr(part, child).weight
    return {name: t.detach().float().numpy() for name, t in out.items()}


@pytest.mark.task("10.4")
@pytest.mark.bundled_model
def test_the_bundled_gguf_runs_as_it_is_with_the_float32_paths_weights_and_answers():
    """SmolLM2's Q4_1 file as it is: every projection and the embedding decode to the float32 loader's weights,
    bit for bit; the weights take about a fifth of the bytes; greedy answers are the same."""
    from miniyaie.engine import EngineConfig, InferenceEngine, SamplingParams
    from miniyaie.quant.gguf_loader import PROJECTIONS
    from miniyaie.quant import weight_bytes

    dense = InferenceEngine("smollm2", EngineConfig(quantization="none"))
    quantized = InferenceEngine("smollm2", EngineConfig(quantization="gguf"))
    d, q = dense.loaded.model, quantized.loaded.model
    for i in (0, 13, 29):
        for name in PROJECTIONS.values():
            part, child = name.split(".")
            dense_weight = getattr(getattr(d.model.layers[i], part), child)
            dense_weight = getattr(dense_weight, "linear", dense_weight).weight
            blocks = getattr(getattr(q.model.layers[i], part), child).qweight
            assert torch.equal(blocks.dequantize(), dense_weight), f"layer {i} {name}: not the float32 path's weights"
    assert weight_bytes(q) <= 110e6 and weight_bytes(d) >= 5 * weight_bytes(q), (weight_bytes(q), weight_bytes(d))
    prompts = ["The capital of France is", "Write a haiku about the sea.", "def fibonacci(n):"]
    params = SamplingParams(max_tokens=24)
    assert [r.text for r in quantized.generate(prompts, params)] == [r.text for r in dense.generate(prompts, params)]
    dense.close()
    quantized.close()
