"""Measurement, not a test: what a bfloat16 K/V pool holds and changes, the same engine run twice.

    python -m miniyaie.bench.lab.bench_kv_cache_dtype

The bundled model with kv_cache_dtype auto (its float32) and bfloat16, everything else equal: the tokens each
pool holds in the default kv_cache_bytes, and the greedy answers to `miniyaie bench quality`'s 16 chat prompts
(64 tokens each), with where each answer that differs parts from the float32 pool's.
"""
from miniyaie.bench.quality import PROMPTS, common_prefix
from miniyaie.engine.inference_engine import InferenceEngine
from miniyaie.model import SamplingParams


def answers(kv_cache_dtype: str) -> tuple[int, list[list[int]]]:
    engine = InferenceEngine(kv_cache_dtype=kv_cache_dtype)
    params = SamplingParams(temperature=0.0, max_tokens=64)
    chats = [engine.tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
             for p in PROMPTS]
    outputs = [engine.generate(chat, params).outputs[0].token_ids for chat in chats]
    return engine.get_stats()["kv_blocks"]["tokens"], outputs


def main() -> None:
    wide_tokens, wide = answers("auto")
    narrow_tokens, narrow = answers("bfloat16")
    print(f"tokens the pool holds: float32 {wide_tokens}, bfloat16 {narrow_tokens}")
    same = sum(a == b for a, b in zip(wide, narrow))
    print(f"greedy answers equal: {same}/{len(PROMPTS)}")
    for prompt, a, b in zip(PROMPTS, wide, narrow):
        if a != b:
            print(f"  {prompt!r}: parts after {common_prefix(a, b)} equal tokens")


if __name__ == "__main__":
    main()
