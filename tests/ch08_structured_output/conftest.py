"""Chapter 8 fixtures: vocabularies (SmolLM2's, and small byte-level ones) and tiny models."""

import sys
from pathlib import Path

import pytest

for folder in ("ch00_model", "ch05_engine"):
    path = str(Path(__file__).resolve().parents[1] / folder)
    if path not in sys.path:
        sys.path.append(path)


@pytest.fixture(scope="session")
def smollm2_vocabulary(smollm2_dir):
    """SmolLM2's 49,152 tokens as bytes (byte-level BPE: some are half a UTF-8 character)."""
    from transformers import AutoTokenizer

    from miniyaie.structured import Vocabulary

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    return Vocabulary.from_tokenizer(tokenizer, [tokenizer.eos_token_id])
