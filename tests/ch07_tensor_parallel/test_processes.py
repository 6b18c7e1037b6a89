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




def test_two_processes_answer_what_transformers_answers(tiny_checkpoint):
    path, hf_model = tiny_checkpoint("qwen2-kv2")
    prompts = [[5, 6, 7, 8, 9], list(range(30, 52))]
    with InferenceEngine(str(path), EngineConfig(**CONFIG, tensor_parallel_size=2)) as engine:
        workers = engine._tensor_parallel.workers
        assert [w.is_alive() for w in workers] == [True], "one worker process (rank 1) should be running"
        for prompt in prompts:
            items = list(engine.stream("", prompt_token_ids=prompt, max_tokens=8, ignore_eos=True))
            assert items[-1].token_ids == transformers_greedy(hf_model, prompt, 8)
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
