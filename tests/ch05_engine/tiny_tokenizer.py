"""A tiny byte-level BPE tokenizer (fits the tiny models' 320-token vocabulary) with a chat template.

Byte-level, like SmolLM2's: any text encodes, and an emoji or a CJK
character becomes several byte tokens, which is what the incremental
detokenizer must handle.
"""

from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "The capital of France is Paris. The sky is blue and the sea is deep.",
    "Once upon a time there was a small engine that served many requests.",
    "hello world, hello engine, hello tokens; 1, 2, 3, 4, 5, 6, 7, 8, 9, 10",
] * 20
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def save_tiny_tokenizer(directory: Path, vocab_size: int = 320):
    """Train and save the tokenizer next to a tiny model; returns the transformers tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", bos_token=None, unk_token=None, pad_token="<|endoftext|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)
    return fast


def save_tiny_chat_model(directory: Path):
    """A tiny random Llama with this tokenizer and chat template in `directory`; returns the transformers model."""
    from tiny_models import save_tiny_model

    hf_model = save_tiny_model("llama", directory)
    tokenizer = save_tiny_tokenizer(directory)
    (directory / "generation_config.json").write_text('{"eos_token_id": %d}' % tokenizer.eos_token_id)
    return hf_model
