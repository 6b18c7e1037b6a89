"""Chapter 0 end to end: the model over its own cache, and SmolLM2's greedy output equal, token for token,
to transformers' generate. These tests need every task of the chapter (module-level marks)."""

import pytest
import torch
from tiny_models import save_tiny_model, transformers_greedy

from miniyaie.model import AttentionMetadata, KVCache, SamplingParams, generate, load_model

pytestmark = [
    pytest.mark.task("0.1"), pytest.mark.task("0.2"), pytest.mark.task("0.3"),
    pytest.mark.task("0.4"), pytest.mark.task("0.5"),
]


def test_kv_cache_decode_equals_full_recompute(tmp_path):
    """Decoding with the cache gives the logits of recomputing the whole sequence from scratch."""
    save_tiny_model("qwen3", tmp_path)
    model = load_model(tmp_path)
    tokens = torch.randint(0, 320, (12,), generator=torch.Generator().manual_seed(2)).tolist()

    def run(cache, seq_tokens, start, block_size):
        new = seq_tokens[start:]
        positions = torch.arange(start, len(seq_tokens))
        meta = AttentionMetadata(
            query_lens=[len(new)], seq_lens=[len(seq_tokens)], slot_mapping=positions,
            block_tables=torch.tensor([[0]]), block_size=block_size,
        )
        return model.compute_logits(model(torch.tensor(new), positions, cache, meta))[-1]

    cache = KVCache(model.config, 32, torch.float32)
    run(cache, tokens[:5], 0, 32)  # prefill 5 tokens
    for end in range(6, len(tokens) + 1):  # then decode one token at a time
        cached_logits = run(cache, tokens[:end], end - 1, 32)
        fresh_logits = run(KVCache(model.config, 32, torch.float32), tokens[:end], 0, 32)
        torch.testing.assert_close(cached_logits, fresh_logits, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def smollm2(smollm2_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf_model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    return load_model(smollm2_dir), hf_model, AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.mark.bundled_model
def test_smollm2_matches_transformers_greedy(smollm2):
    model, hf_model, tokenizer = smollm2
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Explain in two sentences why the sky is blue."}], add_generation_prompt=True, tokenize=True
    )
    prompts = [
        tokenizer("Once upon a time, in a small village by the sea,")["input_ids"],
        tokenizer("def fibonacci(n):")["input_ids"],
        list(chat["input_ids"] if hasattr(chat, "keys") else chat),
    ]
    ours = generate(model, prompts, SamplingParams(max_tokens=32, ignore_eos=True))
    for prompt, generation in zip(prompts, ours):
        assert len(generation.token_ids) == 32
        assert generation.token_ids == transformers_greedy(hf_model, prompt, 32)
