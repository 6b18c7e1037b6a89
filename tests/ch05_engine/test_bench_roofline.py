"""`bench offline` reports its decode steps' measured time next to Task 5.16's roofline (no timing is asserted)."""

import json

import pytest
from step_counter import tiny_config
from tiny_models import save_tiny_model

from miniyaie.bench.roofline import decode_steps, measure_machine, parse_machine
from miniyaie.cli import main
from miniyaie.engine.step_cost import Machine, SeqStep, roofline, step_cost

pytestmark = [pytest.mark.task(f"5.{n}") for n in range(1, 18)]  # end to end, but for own marks


@pytest.mark.parametrize("weights", ["auto", "int4"])
def test_bench_offline_prints_the_roofline_of_its_decode_steps(tmp_path, capsys, weights):
    save_tiny_model("llama", tmp_path / "tiny")
    out_json = tmp_path / "r.json"
    argv = ["bench", "offline", "--model", str(tmp_path / "tiny"), "--num-requests", "4", "--input-len", "3:12",
            "--output-len", "4:8", "--peers", "none", "--no-floor", "--threads", "1", "--no-progress",
            "--machine", "10,100", "--json", str(out_json), "--quantization", weights]
    assert main(argv) == 0
    report = json.loads(out_json.read_text())
    assert report["weights"] == {"auto": "none", "int4": "int4"}[weights], "auto runs a directory's float weights"
    decode = report["decode_steps"]
    assert decode["steps"] >= 3 and decode["machine_gb_s"] == 10 and decode["machine_gflop_s"] == 100
    # ~330 KB of fp32 weights per step at 10 GB/s against ~0.1 MFLOP per token at 100 GFLOP/s: memory-bound
    assert decode["bound"] == "memory" and decode["bounds"] == {"memory": decode["steps"]}
    assert 0 < decode["predicted_s"] < 1e-3 and decode["measured_s"] > 0
    assert "decode steps (" in capsys.readouterr().out


def test_decode_steps_reads_only_the_steps_that_are_all_decodes():
    config = tiny_config("llama")
    machine = Machine(1e9, 1e12)
    chunks = [[(5, 0, True)], [(1, 5, True), (1, 7, True)], [(1, 6, True), (4, 0, False)], [], [(1, 9, True)]]
    decode = decode_steps(config, chunks, [9.0, 2.0, 9.0, 9.0, 4.0], machine, 4)
    assert decode["steps"] == 2 and decode["measured_s"] == 3.0 and decode["median_batch"] == 1.5
    expected = [roofline(step_cost(config, seqs, 4, 4), machine).seconds
                for seqs in ([SeqStep(1, 5), SeqStep(1, 7)], [SeqStep(1, 9)])]
    assert decode["predicted_s"] == pytest.approx(sum(expected) / 2)
    assert decode_steps(config, chunks[:1], [1.0], machine, 4) is None


@pytest.mark.ungraded
def test_the_machine_is_measured_or_given():
    measured = measure_machine(copy_mib=4, matmul_size=64, tries=1)
    assert measured.bytes_per_s > 0 and measured.flops_per_s > 0
    given = parse_machine("20,150")
    assert (given.bytes_per_s, given.flops_per_s) == (20e9, 150e9)
    assert main(["bench", "offline", "--machine", "20"]) == 2


def test_decode_steps_of_weights_in_blocks_count_the_blocks_bytes():
    """Weights in blocks read a fraction of a byte per weight (0.72 for the bundled Q4_1 file): the roofline of
    a step that reads its weights falls with them, and the K/V stays in its own dtype."""
    from dataclasses import replace

    config = tiny_config("llama")
    machine = Machine(1e9, 1e15)  # bound by bytes
    chunks = [[(1, 5, True)]]
    dense = decode_steps(config, chunks, [1.0], machine, 4)
    blocks = decode_steps(config, chunks, [1.0], machine, 4, weight_bytes=0.72)
    cost = step_cost(config, [SeqStep(1, 5)], 4, 4)
    expected = roofline(replace(cost, weight_bytes=round(cost.weight_bytes * 0.72 / 4)), machine).seconds
    assert blocks["predicted_s"] == pytest.approx(expected) and blocks["predicted_s"] < dense["predicted_s"]
