"""Chapter 10's tests name the mistakes a learner is likely to make.

Each case plants one plausible wrong answer in a copy of the reference module, points the chapter's test
module at it, and runs the test that should catch it: it must fail, with a message that names the mistake.
"""

import inspect
import re
from pathlib import Path

import pytest
from planted import import_planted

from miniyaie._switch import SOLUTIONS_ROOT

pytestmark = pytest.mark.ungraded
CH10 = Path(__file__).resolve().parents[1] / "ch10_quantization"

PLANTS = {
    "nibble order swapped": (
        "blocks.py", "\n    return (low | (high << 4))", "\n    return (high | (low << 4))",
        "test_blocks", "test_pack_nibbles_puts_a_groups_first_half_in_the_low_nibbles", r"nibbles are swapped"),
    "nibbles read the wrong way round": (
        "blocks.py", "\n    return torch.cat([half & 15, half >> 4], dim=-1)", "\n    return torch.cat([half >> 4, half & 15], dim=-1)",
        "test_blocks", "test_dequantize_is_the_gguf_packages_dequantization_bit_for_bit", r"wrong way round"),
    "minimum per tensor in dequantize": (
        "blocks.py", "pick(self.mins).float()[..., None]", "pick(self.mins).float()[:1, :1, None]",
        "test_blocks", "test_dequantize_is_the_gguf_packages_dequantization_bit_for_bit", r"whole tensor"),
    "scale rounded after the codes": (
        "quantize.py", "    step, low = scales.float(), mins.float()\n",
        "    step, low = (blocks.amax(-1) - mins.float()) / 15, mins.float()\n    scales = step.half()\n",
        "test_quantize", "test_every_weight_is_within_half_a_step_of_its_decoded_value", r"before it was stored as float16"),
    "minimum per tensor in quantize": (
        "quantize.py", "mins = to_half(blocks.amin(-1), float(\"-inf\"))",
        "mins = to_half(blocks.amin().expand(blocks.shape[:-1]), float(\"-inf\"))",
        "test_quantize", "test_no_step_is_wider_than_its_block_needs", r"every block has its own minimum"),
    "accumulation in bfloat16": (
        "kernel.py", "acc += sums * d[None, :] + x_sum[:, None] * m[None, :]",
        "acc = (acc + sums * d[None, :] + x_sum[:, None] * m[None, :]).to(tl.bfloat16).to(tl.float32)",
        "test_kernel", "test_a_long_row_keeps_float32s_precision", r"running sum rounded to bfloat16"),
    "accumulation in float16": (
        "kernel.py", "acc += sums * d[None, :] + x_sum[:, None] * m[None, :]",
        "acc = (acc + sums * d[None, :] + x_sum[:, None] * m[None, :]).to(tl.float16).to(tl.float32)",
        "test_kernel", "test_a_long_row_keeps_float32s_precision", r"running sum rounded to float16"),
    "weights decoded to float16 before the dot": (
        "kernel.py",
        "            sums = tl.dot(x_first.to(DOT), tl.trans((packed & 15).to(DOT)), out_dtype=tl.float32)\n"
        "            sums += tl.dot(x_second.to(DOT), tl.trans((packed >> 4).to(DOT)), out_dtype=tl.float32)\n"
        "            x_sum = tl.sum(x_first.to(tl.float32), axis=1) + tl.sum(x_second.to(tl.float32), axis=1)\n"
        "            acc += sums * d[None, :] + x_sum[:, None] * m[None, :]\n",
        "            low = ((packed & 15).to(tl.float32) * d[:, None] + m[:, None]).to(tl.float16).to(DOT)\n"
        "            high = ((packed >> 4).to(tl.float32) * d[:, None] + m[:, None]).to(tl.float16).to(DOT)\n"
        "            acc += tl.dot(x_first.to(DOT), tl.trans(low), out_dtype=tl.float32)\n"
        "            acc += tl.dot(x_second.to(DOT), tl.trans(high), out_dtype=tl.float32)\n",
        "test_kernel", "test_a_long_row_keeps_float32s_precision", r"decoded weights rounded to float16"),
    "int4-sym step rounded to nearest": (
        "quantize.py", 'scales = to_half(blocks.abs().amax(-1) / 7, float("inf"))',
        "scales = (blocks.abs().amax(-1) / 7).half()",
        "test_quantize", "test_every_weight_is_within_half_a_step_of_its_decoded_value", r"rounded to nearest",
        {"scheme": "int4-sym"}),
    "bias dropped": (
        "gguf_loader.py", "QuantizedLinear(weight, linear.bias)", "QuantizedLinear(weight)",
        "test_gguf_loader", "test_the_files_blocks_compute_what_the_float32_model_of_the_file_computes",
        r"bias is missing", {"kind": "qwen2", "types": {"token_embd": "Q4_1"}, "architecture": "qwen2"}),
}


@pytest.mark.parametrize("mistake", list(PLANTS))
def test_a_planted_mistake_fails_its_tasks_test_with_a_message_that_names_it(mistake, tmp_path, monkeypatch):
    file, old, new, test_module, test_name, message, *given = PLANTS[mistake]
    source = (SOLUTIONS_ROOT / "quant" / file).read_text()
    assert source.count(old) == 1, f"the reference no longer contains {old!r}: update the plant"
    planted = tmp_path / f"planted_{file}"
    planted.write_text(source.replace(old, new))
    module = import_planted(planted, f"planted_{Path(file).stem}_{abs(hash(mistake))}")
    monkeypatch.syspath_prepend(str(CH10))
    monkeypatch.syspath_prepend(str(CH10.parent / "ch00_model"))
    tests = import_planted(CH10 / f"{test_module}.py", f"planted_tests_{test_module}")
    for name in dir(tests):  # the test module's names that the planted module defines anew
        if hasattr(module, name) and not name.startswith("_") and name not in ("torch", "np", "pytest"):
            if getattr(getattr(module, name), "__module__", None) == module.__name__:
                monkeypatch.setattr(tests, name, getattr(module, name))
    if file == "kernel.py":
        monkeypatch.setattr(tests, "quant_matmul", module.quant_matmul)
    test = getattr(tests, test_name)
    params = {"kind": "Q4_1", "scheme": "int4", "bits": 4, "tmp_path": tmp_path, **(given[0] if given else {})}
    if "types" in params:  # GGUF's type names, as the test module's enum
        params["types"] = {name: getattr(tests.Q, kind) for name, kind in params["types"].items()}

    wanted = {k: v for k, v in params.items() if k in inspect.signature(test).parameters}
    with pytest.raises((AssertionError, ExceptionGroup)) as failure:  # hypothesis groups distinct failures
        test(**wanted)
    messages = [str(e) for e in (failure.value.exceptions if isinstance(failure.value, ExceptionGroup) else [failure.value])]
    assert any(re.search(message, m) for m in messages), f"no message names the mistake ({message!r}): {messages}"
