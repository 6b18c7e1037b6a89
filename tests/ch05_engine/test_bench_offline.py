"""`miniyaie bench offline` end to end on a tiny model: it runs, counts honestly, writes JSON and a plot.

No timing is asserted (the machine is shared); what is checked is what the
table claims: every system produced exactly the workload's output tokens,
ratios are consistent with the tok/s, and the prefix cache reaches the
workload's optimum hit rate when groups arrive together.
"""

import json

import pytest
from tiny_models import save_tiny_model

from miniyaie.bench.workloads import random_workload, shared_prefix_workload
from miniyaie.cli import main

pytestmark = [pytest.mark.task(f"5.{n}") for n in range(1, 18)]  # end to end, but for own marks


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama-bench")
    save_tiny_model("llama", path)
    return path


def test_bench_offline_random_with_peers_json_and_plot(tiny_dir, tmp_path, capsys):
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    argv = ["bench", "offline", "--model", str(tiny_dir), "--workload", "random", "--num-requests", "5",
            "--input-len", "3:20", "--output-len", "2:6", "--threads", "1", "--no-progress",
            "--json", str(out_json), "--plot", str(out_png)]
    assert main(argv) == 0
    report = json.loads(out_json.read_text())
    workload = random_workload(5, 320, (3, 20), (2, 6))
    assert (report["num_requests"], report["prompt_tokens"]) == (5, workload.num_prompt_tokens)
    systems = [row["system"] for row in report["rows"]]
    assert systems == ["miniyaie", "no-attention baseline", "hf generate (static 16)", "hf continuous batching"]
    ours = report["rows"][0]
    for row in report["rows"]:
        assert row["output_tokens"] == workload.num_output_tokens
        if "ours_over_this" in row:
            assert row["ours_over_this"] == pytest.approx(ours["output_tok_s"] / row["output_tok_s"], rel=0.02)
    assert 0 < report["efficiency_vs_floor"]
    assert out_png.read_bytes()[:4] == b"\x89PNG"
    table = capsys.readouterr().out
    assert "hf continuous batching" in table and "ours / no-attention baseline" in table


def test_bench_offline_sampled_makes_every_system_sample(tiny_dir, tmp_path, capsys):
    out_json = tmp_path / "sampled.json"
    argv = ["bench", "offline", "--model", str(tiny_dir), "--workload", "random", "--num-requests", "4",
            "--input-len", "3:12", "--output-len", "2:5", "--sampling", "sampled", "--peers", "hf-static,hf-cb",
            "--no-floor", "--threads", "1", "--no-progress", "--json", str(out_json)]
    assert main(argv) == 0
    report = json.loads(out_json.read_text())
    assert report["sampling"] == {"mode": "sampled", "temperature": 0.7, "top_p": 0.9, "top_k": 50}
    workload = random_workload(4, 320, (3, 12), (2, 5))
    assert [row["system"] for row in report["rows"]] == ["miniyaie", "hf generate (static 16)"]
    assert all(row["output_tokens"] == workload.num_output_tokens for row in report["rows"])
    assert report["not_run"] == [{"system": "hf continuous batching", "status": "skipped",
                                  "reason": "greedy only (--sampling greedy)"}], "a peer that cannot sample must say so"
    table = capsys.readouterr().out
    assert "sampled (temperature 0.7, top_p 0.9, top_k 50)" in table and "compare the tok/s" in table


def test_bench_offline_shared_prefix_reaches_the_optimum_hit_rate(tiny_dir, tmp_path):
    out_json = tmp_path / "s.json"
    argv = ["bench", "offline", "--model", str(tiny_dir), "--workload", "shared-prefix", "--num-requests", "6",
            "--group-size", "3", "--prefix-len", "40", "--question-len", "5", "--output-len", "3",
            "--peers", "none", "--no-floor", "--threads", "1", "--no-progress", "--json", str(out_json)]
    assert main(argv) == 0
    report = json.loads(out_json.read_text())
    workload = shared_prefix_workload(2, 3, 320, 40, 5, 3)
    assert report["optimum_hit_rate"] == pytest.approx(workload.optimum_hit_rate(16), abs=1e-4)
    off, on = report["rows"]
    assert off["hit_rate"] == 0
    # the second and third request of a group arrive with the first: they must wait for its prefix
    assert on["hit_rate"] == pytest.approx(report["optimum_hit_rate"], abs=1e-4)


@pytest.mark.ungraded
def test_bench_offline_refuses_bad_options(capsys):
    assert main(["bench", "offline", "--peers", "hf-static,sglang"]) == 2
    assert "unknown peer 'sglang'" in capsys.readouterr().err
    assert main(["bench", "offline", "--input-len", "9:3"]) == 2
    assert main(["bench", "offline", "--model", "/no/such/dir", "--no-progress"]) == 2


@pytest.mark.ungraded
def test_optimum_hit_rate_counts_whole_blocks_of_the_shared_prefix():
    w = shared_prefix_workload(num_groups=4, group_size=8, vocab_size=100, prefix_len=512, question_len=32, output_len=1)
    assert w.optimum_hit_rate(16) == pytest.approx(4 * 7 * 512 / (32 * 544))  # 82.35%: 82.3% in the book's tables
    w = shared_prefix_workload(num_groups=1, group_size=2, vocab_size=100, prefix_len=20, question_len=0, output_len=1)
    assert w.optimum_hit_rate(16) == pytest.approx(16 / 40)  # one whole block; the last token is always computed


def test_bench_offline_runs_the_engine_split_over_two_processes(tmp_path):
    """--tensor-parallel-size 2 adds a row from chapter 7's engine: same tokens as ours, every output token counted."""
    path = tmp_path / "tiny-kv2"
    save_tiny_model("llama", path)  # 4 query heads, 2 KV heads: splits over 2 ranks
    out_json = tmp_path / "tp.json"
    argv = ["bench", "offline", "--model", str(path), "--workload", "random", "--num-requests", "4",
            "--input-len", "3:20", "--output-len", "2:6", "--peers", "none", "--no-floor", "--threads", "1",
            "--no-progress", "--tensor-parallel-size", "2", "--json", str(out_json)]
    assert main(argv) == 0
    report = json.loads(out_json.read_text())
    ours, split = report["rows"]
    assert split["system"] == "miniyaie, tensor parallel x2"
    assert split["output_tokens"] == ours["output_tokens"] == random_workload(4, 320, (3, 20), (2, 6)).num_output_tokens
    assert split["same_tokens_as_ours"] == 4, "greedy tokens on two ranks must equal one process's"
