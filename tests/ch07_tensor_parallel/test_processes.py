"""The tensor-parallel engine in real processes: gloo collectives, spawned ranks, failures that end loudly.

Provided code (the runtime around Task 7.4): these tests start processes,
so they are few and use one tiny model.
"""

import os
import signal
import time

import pytest
from tiny_models import transformers_greedy

from miniyaie.distributed import TensorParallelError, TensorParallelSizeError
from miniyaie.engine import EngineConfig, EngineError, InferenceEngine

pytestmark = pytest.mark.ungraded
CONFIG = dict(block_size=4, num_blocks=64, max_num_batched_tokens=16)




@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    """A tiny Llama with a byte-level tokenizer, so the engine's text path runs too."""
    import sys
    from pathlib import Path

    sys.path.append(str(Path(__file__).resolve().parents[1] / "ch05_engine"))
    from tiny_tokenizer import save_tiny_chat_model

    directory = tmp_path_factory.mktemp("tiny-chat-tp")
    return directory, save_tiny_chat_model(directory)


def test_two_processes_answer_what_one_process_and_transformers_answer(chat_model):
    path, hf_model = chat_model
    prompts = ["Hello there", "The quick brown fox jumps over the lazy dog"]
    with InferenceEngine(str(path), EngineConfig(**CONFIG)) as one:
        want = one.generate(prompts, max_tokens=8, ignore_eos=True)
    with InferenceEngine(str(path), EngineConfig(**CONFIG, tensor_parallel_size=2)) as engine:
        workers = engine._tensor_parallel.workers
        assert [w.is_alive() for w in workers] == [True], "one worker process (rank 1) should be running"
        got = engine.generate(prompts, max_tokens=8, ignore_eos=True)
        for g, w in zip(got, want):
            assert g.token_ids == w.token_ids == transformers_greedy(hf_model, w.prompt_token_ids, 8)
            assert g.text == w.text
        engine.check_health()
    assert not any(w.is_alive() for w in workers), "closing the engine ends its worker processes"


def test_a_rank_that_dies_fails_requests_loudly_and_the_engine_says_so(tiny_checkpoint):
    path, _ = tiny_checkpoint("qwen2-kv2")
    engine = InferenceEngine(str(path), EngineConfig(**CONFIG, tensor_parallel_size=2))
    try:
        worker = engine._tensor_parallel.workers[0]
        os.kill(worker.pid, signal.SIGKILL)
        worker.join(10)
        started = time.monotonic()
        with pytest.raises(EngineError, match="tensor-parallel rank failed"):
            list(engine.stream("", prompt_token_ids=[1, 2, 3], max_tokens=4, ignore_eos=True))
        assert time.monotonic() - started < 30, "the failure must surface well within the collective timeout"
        with pytest.raises(TensorParallelError):
            engine.check_health()
    finally:
        engine.close()


def test_a_size_that_does_not_split_the_heads_is_refused_before_any_process_starts(tiny_checkpoint):
    path, _ = tiny_checkpoint("qwen2-kv2")  # 4 query heads
    with pytest.raises(TensorParallelSizeError, match="does not divide the model's 4 query heads"):
        InferenceEngine(str(path), EngineConfig(**CONFIG, tensor_parallel_size=3))


def test_smollm2_takes_three_ranks_and_refuses_two():
    from miniyaie.distributed import check_tensor_parallel_size

    check_tensor_parallel_size(9, 3, 3)
    with pytest.raises(TensorParallelSizeError, match="^tensor-parallel size 2 does not divide the model's 9 query heads$"):
        check_tensor_parallel_size(9, 3, 2)
