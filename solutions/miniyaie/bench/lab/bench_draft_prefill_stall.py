"""Timing, not a test: the longest wait of a decoding request while a 3,000-token prompt arrives.

    python -m miniyaie.bench.lab.bench_draft_prefill_stall plain draft

The bundled SmolLM2 (drafting for itself with `draft`): one request decodes, then a long prompt joins. The
figure is the longest gap between the first request's tokens: a draft model that prefilled the whole
prompt in one pass stalled every step for that long (backends/draft_prefill.py chunks it).
"""
import random
import sys
import time

from miniyaie.engine import EngineConfig, InferenceEngine, LLMEngine, SamplingParams


def main():
    loaded = InferenceEngine("smollm2").loaded
    rng = random.Random(0)
    long_prompt = [rng.randrange(1000, 40000) for _ in range(3000)]
    short = loaded.tokenizer.encode("Repeat exactly: the quick brown fox jumps over the lazy dog.")
    for mode in sys.argv[1:] or ["plain", "draft"]:
        settings = dict(speculative="draft", num_speculative_tokens=3) if mode == "draft" else {}
        llm = LLMEngine(loaded.model, EngineConfig(num_blocks=400, **settings),
                        draft_model=loaded.model if mode == "draft" else None)
        first = llm.add_request(short, SamplingParams(max_tokens=60, ignore_eos=True))
        for _ in range(3):
            llm.step()
        llm.add_request(long_prompt, SamplingParams(max_tokens=4, ignore_eos=True))
        gaps, last = [], time.perf_counter()
        while llm.has_unfinished():
            events = llm.step()
            if any(e.request_id == first for e in events):
                now = time.perf_counter()
                gaps.append(now - last)
                last = now
        print(f"{mode}: longest gap between the first request's tokens {max(gaps):.2f} s ({llm.counters['steps']} steps)")


if __name__ == "__main__":
    main()
