"""`miniyaie bench quality` (miniyaie/bench/quality.py) on a tiny random Llama: no bundled model, no network.

Oracles: the negative log-likelihood computed here from the logits by hand; a model that predicts every
token with the same probability (perplexity = vocabulary size); a greedy loop of full forward calls;
hand-counted agreements.
"""

import math

import pytest
import torch

from miniyaie.bench.quality import (DEFAULT_VARIANTS, PROMPTS, book_text, format_table, greedy_agreement, greedy_outputs,
                                    perplexity, plain_text, quality_text, quantized_copy)
from miniyaie.quant import QuantizedLinear

pytestmark = pytest.mark.ungraded  # provided machinery, not a learner's task

VOCAB = 300


@pytest.fixture(scope="module")
def tiny():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         initializer_range=0.2, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()  # initializer_range 0.2: peaky logits, far from uniform


def _ids(n: int, seed: int = 0) -> list[int]:
    return torch.randint(3, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _perplexity_by_hand(model, windows: list[list[int]]) -> float:
    nll = []
    with torch.no_grad():
        for w in windows:
            logp = torch.log_softmax(model(torch.tensor([w])).logits[0].double(), dim=-1)
            nll += [-float(logp[i, w[i + 1]]) for i in range(len(w) - 1)]
    return math.exp(sum(nll) / len(nll))


def test_perplexity_is_exp_of_the_mean_nll_within_each_window(tiny):
    ids = _ids(40)
    one = perplexity(tiny, ids, window=64)
    assert one == pytest.approx(_perplexity_by_hand(tiny, [ids]), rel=1e-5)
    assert not VOCAB / 2 < one < VOCAB * 2, "the tiny model's logits are peaky: its perplexity is far from uniform's"
    cut = perplexity(tiny, ids, window=16)  # windows 0-15, 16-31, 32-39: a window's first token is context only
    assert cut == pytest.approx(_perplexity_by_hand(tiny, [ids[:16], ids[16:32], ids[32:]]), rel=1e-5)
    assert cut != pytest.approx(one, rel=1e-6), "shorter windows see less context, so the perplexity changes"
    with pytest.raises(ValueError, match="at least 2"):
        perplexity(tiny, ids[:1], window=16)


def test_a_model_that_predicts_uniformly_has_the_vocabulary_size_as_perplexity(tiny):
    import copy

    uniform = copy.deepcopy(tiny)
    with torch.no_grad():
        uniform.lm_head.weight.zero_()  # every logit 0: every token has probability 1 / VOCAB
    assert perplexity(uniform, _ids(50, seed=1), window=32) == pytest.approx(VOCAB, rel=1e-5)


def test_int8_costs_little_perplexity_and_int4_some_and_the_float_model_is_left_as_it_was(tiny):
    ids = _ids(64, seed=2)
    base = perplexity(tiny, ids, window=64)
    int8 = quantized_copy(tiny, "int8")
    assert int8 is not tiny and isinstance(int8.model.layers[0].mlp.down_proj, QuantizedLinear), "int8 was applied"
    assert isinstance(tiny.model.layers[0].mlp.down_proj, torch.nn.Linear), "the float32 model is not changed"
    assert perplexity(int8, ids, window=64) == pytest.approx(base, rel=0.03)
    int4 = perplexity(quantized_copy(tiny, "int4-g32"), ids, window=64)
    assert int4 != pytest.approx(base, rel=1e-6), "int4 weights change the logits, so the perplexity moves"
    assert quantized_copy(tiny, "none") is tiny
    with pytest.raises(ValueError, match="multiple of the group"):  # the run reports such a variant as not applicable
        quantized_copy(tiny, "int4-g128")
    assert perplexity(tiny, ids, window=64) == base


def test_greedy_outputs_are_the_argmax_of_full_forward_calls(tiny):
    prompts = [_ids(5, seed=3), _ids(9, seed=4)]
    outputs = greedy_outputs(tiny, prompts, 6, eos_token_id=None, pad_token_id=0)
    for prompt, out in zip(prompts, outputs):
        seq = list(prompt)
        with torch.no_grad():
            for _ in range(6):
                seq.append(int(tiny(torch.tensor([seq])).logits[0, -1].argmax()))
        assert out == seq[len(prompt):]
    int8 = quantized_copy(tiny, "int8")
    agreement = greedy_agreement(outputs, greedy_outputs(int8, prompts, 6, eos_token_id=None, pad_token_id=0))
    assert agreement.total == 2 and 0 <= agreement.exact <= 2


def test_agreement_counts_equal_outputs_and_the_matching_prefix():
    reference = [[1, 2, 3], [4, 5, 6, 7], [8, 9], [1], []]
    outputs = [[1, 2, 3], [4, 5, 0, 7], [8, 9, 10], [2], []]
    a = greedy_agreement(reference, outputs)
    assert (a.exact, a.total) == (2, 5), "only equal outputs count, a longer one that starts the same does not"
    assert a.mean_prefix == pytest.approx((3 + 2 + 2 + 0 + 0) / 5)
    assert a.mean_prefix_fraction == pytest.approx((1 + 2 / 4 + 2 / 3 + 0 + 1) / 5)
    assert greedy_agreement(reference, reference).exact == 5
    with pytest.raises(ValueError):
        greedy_agreement(reference, outputs[:-1])


def test_the_text_is_the_book_s_prose_without_markup():
    md = "# Title\n\nSome *bold* `code` and a [link](http://x.y).\n\n```python\nx = 1\n```\n| a | b |\n|---|---|\n"
    text = plain_text(md)
    assert "Title" in text and "bold" in text and "link" in text and "code" in text
    assert not any(s in text for s in ("#", "*", "`", "http", "x = 1", "|", "---"))
    book = book_text()
    assert book.startswith("Chapter 0") and len(book) > 50_000 and "```" not in book
    shipped = quality_text()
    assert shipped.startswith("Chapter 0") and len(shipped) > 20_000 and "```" not in shipped, (
        "the shipped text is a book page's prose")
    assert "What the reference" not in shipped and "Challenge" not in shipped, (
        "the shipped text stops before the page's challenge: an installed file must not carry a reference's design")


def test_the_table_has_a_row_per_measured_variant_and_names_the_ones_that_could_not_apply():
    report = dict(command="miniyaie bench quality", cpu="cpu", threads=2, torch="t", transformers="tf", date="d",
                  text="text", window=512, prompts=16, new_tokens=64, note=None, rows=[
                      dict(variant="none", weight_mb=538.1, perplexity=69.29, ppl_change_pct=0.0, exact=16, total=16,
                           mean_prefix=64.0, mean_prefix_fraction=1.0),
                      dict(variant="int4-g64", weight_mb=170.2, perplexity=93.2, ppl_change_pct=34.5, exact=1, total=16,
                           mean_prefix=12.25, mean_prefix_fraction=0.19),
                      dict(variant="int4-g128", skipped="576 is no multiple of 128")])
    table = format_table(report).splitlines()
    assert "| int4-g64 | 170.2 | 93.200 | +34.50% | 1/16 | 12.2 tokens (19%) |" in table
    assert sum(line.startswith("| ") for line in table) == 3, "a header and the two measured rows"
    assert "int4-g128: not applicable: 576 is no multiple of 128" in table


def test_the_command_parses_its_flags_and_refuses_unknown_variants(capsys):
    from miniyaie.cli.args import UsageError
    from miniyaie.cli.main import build_parser, main

    parser = build_parser()
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["bench", "quality", "--help"])
    assert exit_.value.code == 0 and "--variants" in capsys.readouterr().out
    args = parser.parse_args(["bench", "quality"])
    assert args.variants == list(DEFAULT_VARIANTS) and args.prompts == len(PROMPTS) == 16
    args = parser.parse_args(["bench", "quality", "--variants", "int8,int4-g64", "--tokens", "128", "--prompts", "2"])
    assert (args.variants, args.tokens, args.prompts) == (["int8", "int4-g64"], 128, 2)
    with pytest.raises(UsageError, match="unknown quantization"):
        parser.parse_args(["bench", "quality", "--variants", "int3"])
    args = parser.parse_args(["bench", "quality", "--variants", "kv-bf16,gguf+kv-bf16"])
    assert args.variants == ["kv-bf16", "gguf+kv-bf16"]
    with pytest.raises(UsageError, match="unknown K/V variant"):
        parser.parse_args(["bench", "quality", "--variants", "int8+kv-fp7"])
    assert main(["bench", "quality", "--prompts", "17"]) == 2  # refused before any model is loaded
    assert main(["bench", "quality", "--model", "/nowhere", "--variants", "gguf"]) == 2
    assert main(["bench", "quality", "--model", "/nowhere", "--variants", "gguf+kv-bf16"]) == 2


def test_kv_bf16_rounds_exactly_the_keys_after_rotation_and_the_values_and_then_lets_go(tiny):
    """The oracle: the model's own forward with keys and values rounded by hand through a copy of its attention."""
    from miniyaie.bench.kv_rounding import kv_rounded, split_kv

    assert split_kv("gguf+kv-bf16") == ("gguf", torch.bfloat16) and split_kv("kv-bf16") == ("none", torch.bfloat16)
    assert split_kv("int8") == ("int8", None)
    ids = torch.tensor([_ids(40)])
    with torch.no_grad():
        plain = tiny(ids).logits
        with kv_rounded(tiny, torch.bfloat16):
            rounded = tiny(ids).logits
        after = tiny(ids).logits
    assert torch.equal(after, plain), "leaving the block must give the model back as it was"
    moved = float((rounded - plain).abs().max())
    assert 0 < moved < 0.1 * float(plain.abs().max()), f"bfloat16 keys and values move the logits a little, not {moved}"
    import transformers.models.llama.modeling_llama as llama

    rotate = llama.apply_rotary_pos_emb
    calls = []
    with kv_rounded(tiny, torch.bfloat16), torch.no_grad():
        q = torch.randn(1, 4, 3, 16)
        k = torch.randn(1, 2, 3, 16)
        cos, sin = torch.randn(1, 3, 16), torch.randn(1, 3, 16)
        q2, k2 = llama.apply_rotary_pos_emb(q, k, cos, sin)
        want_q, want_k = rotate(q, k, cos, sin)
        calls.append(tiny.model.layers[0].self_attn.v_proj(torch.randn(3, 64)))
    assert torch.equal(q2, want_q), "queries stay float32, as in the engine"
    assert torch.equal(k2, want_k.to(torch.bfloat16).float()), "keys are rounded after the rotation, as the cache holds them"
    assert torch.equal(calls[0], calls[0].to(torch.bfloat16).float()), "values are rounded"
