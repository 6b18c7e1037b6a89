"""The tensor-parallel engine in real processes: gloo collectives, spawned ranks, failures that end loudly.

Provided code (the runtime around Task 7.4, the command line's flag): these
tests start processes, so they are few and use tiny models. Failures are
real: a worker stopped, then killed, while two requests wait for it; a rank
0 killed while its worker idles.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from tiny_models import transformers_greedy

from miniyaie.cli.main import main
from miniyaie.distributed import TensorParallelError, TensorParallelSizeError
from miniyaie.engine import CompletionDelta, EngineConfig, EngineError, InferenceEngine

CONFIG = dict(block_size=4, num_blocks=64, max_num_batched_tokens=16)


def exited(pid: int) -> bool:
    """True once process `pid` has ended (gone, or a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    """A tiny Llama with a byte-level tokenizer, so the engine's text path runs too."""
    import sys
    from pathlib import Path

    sys.path.append(str(Path(__file__).resolve().parents[1] / "ch05_engine"))
    from tiny_tokenizer import save_tiny_chat_model

    directory = tmp_path_factory.mktemp("tiny-chat-tp")
    return directory, save_tiny_chat_model(directory)


@pytest.mark.task("7.4")
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


def complete(engine, ids: list[int], max_tokens: int) -> list[int]:
    """The token ids of one request, streamed to its end."""
    (out,) = [item for item in engine.stream("", prompt_token_ids=ids, max_tokens=max_tokens, ignore_eos=True)
              if not isinstance(item, CompletionDelta)]
    return out.token_ids


@pytest.mark.task("7.4")
def test_a_rank_that_dies_fails_the_requests_in_flight_loudly_and_the_engine_says_so(chat_model):
    engine = InferenceEngine(str(chat_model[0]), EngineConfig(**CONFIG, tensor_parallel_size=2))
    try:
        worker = engine._tensor_parallel.workers[0]
        assert len(complete(engine, [1, 2, 3], 4)) == 4
        os.kill(worker.pid, signal.SIGSTOP)  # the next step waits for rank 1 in its first collective
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(complete, engine, ids, 8) for ids in ([1, 2, 3], [4, 5, 6, 7])]
            time.sleep(1.0)
            in_flight = not any(f.done() for f in futures)
            os.kill(worker.pid, signal.SIGKILL)  # before any assertion: a stopped worker would not end otherwise
            assert in_flight, "both requests should be in flight, waiting for rank 1"
            started = time.monotonic()
            for future in futures:
                with pytest.raises(EngineError, match="tensor-parallel rank failed"):
                    future.result(timeout=30)
            assert time.monotonic() - started < 30, "the failure must surface well within the collective timeout"
        worker.join(10)
        with pytest.raises(EngineError, match="tensor-parallel rank failed"):  # and so does every later request
            complete(engine, [1, 2, 3], 4)
        with pytest.raises(TensorParallelError):
            engine.check_health()
    finally:
        engine.close()


RANK0 = textwrap.dedent("""
    import sys, time
    from miniyaie.engine import EngineConfig, InferenceEngine
    if __name__ == "__main__":
        engine = InferenceEngine(sys.argv[1], EngineConfig(block_size=4, num_blocks=64, tensor_parallel_size=2))
        print(engine._tensor_parallel.workers[0].pid, flush=True)
        time.sleep(300)
""")


@pytest.mark.task("7.4")
def test_the_workers_of_a_rank_0_that_dies_shut_down(chat_model, tmp_path):
    """Killed rank 0 cannot tell anyone: its worker, idle on the control plane, sees the connection close and exits."""
    script = tmp_path / "rank0.py"
    script.write_text(RANK0)
    rank0 = subprocess.Popen([sys.executable, str(script), str(chat_model[0])], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        line = rank0.stdout.readline()
        assert line.strip().isdigit(), f"rank 0 should print its worker's pid, printed {line!r}"
        worker = int(line)
        assert not exited(worker), "the worker should be running before rank 0 dies"
    finally:
        rank0.kill()
        rank0.wait()
    deadline = time.monotonic() + 30
    while not exited(worker) and time.monotonic() < deadline:
        time.sleep(0.2)
    if not exited(worker):
        os.kill(worker, signal.SIGKILL)
        pytest.fail("rank 1 still runs 30 s after rank 0 died")


@pytest.mark.task("7.1")
def test_a_size_that_does_not_split_the_heads_is_refused_before_any_process_starts(tiny_checkpoint):
    path, _ = tiny_checkpoint("qwen2-kv2")  # 4 query heads
    with pytest.raises(TensorParallelSizeError, match="does not divide the model's 4 query heads"):
        InferenceEngine(str(path), EngineConfig(**CONFIG, tensor_parallel_size=3))


@pytest.mark.task("7.1")
def test_smollm2_takes_three_ranks_and_refuses_two():
    from miniyaie.distributed import check_tensor_parallel_size

    check_tensor_parallel_size(9, 3, 3)
    with pytest.raises(TensorParallelSizeError, match="^tensor-parallel size 2 does not divide the model's 9 query heads$"):
        check_tensor_parallel_size(9, 3, 2)


@pytest.mark.task("7.4")
def test_the_command_line_splits_the_model_and_refuses_a_size_in_one_line(chat_model, capsys):
    path = str(chat_model[0])
    texts = []
    for size in ("1", "2"):
        assert main(["generate", "--model", path, "--max-tokens", "8", "--tensor-parallel-size", size, "Hello there"]) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0].startswith("Hello there") and len(texts[0]) > len("Hello there\n"), f"no text generated: {texts[0]!r}"
    assert texts[1] == texts[0], "generate --tensor-parallel-size 2 should print what one process prints"
    for command in (["generate", "hi"], ["chat", "--message", "hi"], ["serve"]):
        assert main([*command, "--model", path, "--tensor-parallel-size", "3"]) == 2
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("miniyaie: error:")]
        assert errors == ["miniyaie: error: tensor-parallel size 3 does not divide the model's 4 query heads"], errors


@pytest.mark.ungraded
@pytest.mark.parametrize("device, rank, gpu", [("cuda:1", 1, 1), ("cuda", 2, 2)])
def test_an_nccl_rank_joins_from_its_own_gpu(monkeypatch, device, rank, gpu):
    """NCCL talks from the current GPU, so join makes it the rank's before the group forms; gloo touches no GPU.

    The group itself is faked: no test of this course runs NCCL (it needs a GPU per rank).
    """
    from miniyaie.distributed import process_group

    calls = []
    monkeypatch.setattr(process_group.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(process_group.dist, "init_process_group", lambda backend, **kw: calls.append(("init", backend)))
    monkeypatch.setattr(process_group.dist, "new_group", lambda backend, **kw: calls.append(("control", backend)))
    monkeypatch.setattr(process_group.torch.cuda, "set_device", lambda index: calls.append(("set_device", index)))
    process_group.join(rank, 4, "127.0.0.1", 1, device)
    assert calls == [("set_device", gpu), ("init", "nccl"), ("control", "gloo")]
    calls.clear()
    process_group.join(rank, 4, "127.0.0.1", 1, "cpu")
    assert calls == [("init", "gloo"), ("control", "gloo")]
