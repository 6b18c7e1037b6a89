"""Chapter 11's tests name the mistakes a learner is likely to make.

Each case plants one plausible wrong answer in a copy of the reference module, points the chapter's test
module at it, and runs the test that should catch it: it must fail, with a message that names the mistake.
"""

import re
from pathlib import Path

import pytest
from planted import import_planted

from miniyaie._switch import SOLUTIONS_ROOT

pytestmark = pytest.mark.ungraded
CH11 = Path(__file__).resolve().parents[1] / "ch11_lora"

PLANTS = {
    "alpha / r where rslora wants alpha / sqrt(r)": (
        "adapter.py", "alpha / math.sqrt(rank) if settings.get(\"use_rslora\") else alpha / rank", "alpha / rank",
        "test_adapter", "test_each_modules_delta_is_what_peft_merges", {"name": "mlp-r4-rslora"}, r"alpha / sqrt\(r\)"),
    "alpha / sqrt(r) without rslora": (
        "adapter.py", "alpha / math.sqrt(rank) if settings.get(\"use_rslora\") else alpha / rank", "alpha / math.sqrt(rank)",
        "test_adapter", "test_each_modules_delta_is_what_peft_merges", {"name": "all-r8"}, r"without use_rslora"),
    "A and B transposed": (
        "batched.py", "shrunk = x[rows] @ a[slot].T\n        y.index_add_(0, rows, (shrunk @ b[slot].T)",
        "shrunk = x[rows] @ a[slot]\n        y.index_add_(0, rows, (shrunk @ b[slot])",
        "test_batched", "test_add_lora_is_the_row_by_row_definition", {}, r"transposed"),
    "the delta added to rows without an adapter": (
        "batched.py", "rows = torch.nonzero(slot_of_row >= 0)", "rows = torch.nonzero(slot_of_row >= -1)",
        "test_batched", "test_add_lora_is_the_row_by_row_definition", {}, r"rows without an adapter"),
    "results scattered back to the wrong rows": (
        "batched.py", "\n        y.index_add_(0, rows, (shrunk", "\n        y.index_add_(0, torch.arange(start, start + length), (shrunk",
        "test_batched", "test_add_lora_is_the_row_by_row_definition", {}, r"landed on another row"),
    "the merged q/k/v delta from the wrong slice": (
        "merged.py", "shrunk[:, j * rank : (j + 1) * rank]", "shrunk[:, :rank]",
        "test_merged", "test_add_merged_lora_gives_each_member_its_own_delta", {}, r"slice"),
    "the merged delta added to the wrong member": (
        "merged.py", "\n        for j, (out, b) in enumerate(zip(outputs, bs)):",
        "\n        for j, (out, b) in enumerate(zip(outputs[::-1], bs)):",
        "test_merged", "test_add_merged_lora_gives_each_member_its_own_delta", {}, r"member"),
    "the segment index used as the slot": (
        "kernel.py", "tl.load(lengths_ptr + j), tl.load(slots_ptr + j)", "tl.load(lengths_ptr + j), j",
        "test_sgmv_kernel", "test_each_segment_uses_its_own_slots_weights_and_scaling", {"layout": "contiguous"},
        r"segment j used slot j"),
    "the scaling read by segment index": (
        "kernel.py", "tl.load(scaling_ptr + slot)", "tl.load(scaling_ptr + j)",
        "test_sgmv_kernel", "test_each_segment_uses_its_own_slots_weights_and_scaling", {"layout": "contiguous"},
        r"scaling\[slots\[j\]\]"),
    "A's input-axis stride ignored": (
        "kernel.py", "a_base + r[:, None] * stride_a_rank + kk[None, :] * stride_a_in",
        "a_base + r[:, None] * stride_a_rank + kk[None, :]",
        "test_sgmv_kernel", "test_each_segment_uses_its_own_slots_weights_and_scaling",
        {"layout": "A and B transposed in memory"}, r"strides"),
    "the scaling folded into the stored B": (
        "slots.py", "self.b[module][slot, layer, :, :rank] = b\n        self.scaling[slot] = adapter.scaling",
        "self.b[module][slot, layer, :, :rank] = b * adapter.scaling\n        self.scaling[slot] = 1.0",
        "test_slots", "test_a_slot_multiplies_as_its_adapter_after_any_loads", {}, r"own scaling \(not folded into B\)"),
    "the slot zeroed before the adapter is checked": (
        "slots.py", "        rank = adapter.rank\n        if rank > self.max_rank:",
        "        for stack in (*self.a.values(), *self.b.values()):\n            stack[slot].zero_()\n"
        "        rank = adapter.rank\n        if rank > self.max_rank:",
        "test_slots", "test_a_refused_adapter_leaves_the_slot_as_it_was", {}, r"a refused load must leave the slot as it was"),
    "rank_pattern served at r": (
        "adapter.py", '        "rank_pattern": "a per-module rank (rank_pattern) is not supported",\n', "",
        "test_adapter", "test_an_adapter_that_would_be_served_wrong_is_refused_with_one_line", {"case": "rank_pattern"}, r"accepted.*rank_pattern"),
    "alpha_pattern served at lora_alpha": (
        "adapter.py", '        "alpha_pattern": "a per-module alpha (alpha_pattern) is not supported",\n', "",
        "test_adapter", "test_an_adapter_that_would_be_served_wrong_is_refused_with_one_line", {"case": "alpha_pattern"}, r"accepted.*alpha_pattern"),
    "modules_to_save ignored": (
        "adapter.py", '        "modules_to_save": f"modules_to_save', '        "ignored": f"modules_to_save',
        "test_adapter", "test_an_adapter_that_would_be_served_wrong_is_refused_with_one_line", {"case": "modules_to_save"}, r"accepted.*modules_to_save"),
    "lora_bias ignored": (
        "adapter.py", '        "lora_bias": "a bias', '        "ignored": "a bias',
        "test_adapter", "test_an_adapter_that_would_be_served_wrong_is_refused_with_one_line", {"case": "lora_bias"}, r"accepted.*lora_bias"),
    "a tensor under the wrong parent accepted": (
        "adapter.py", "if PROJECTIONS.get(module) != parent:", "if module not in PROJECTIONS:",
        "test_adapter", "test_an_adapter_that_would_be_served_wrong_is_refused_with_one_line", {"case": "wrong_parent"}, r"accepted.*under mlp"),
    "the tensors' rank not checked against r": (
        "adapter.py", "tuple(a.shape) != (rank, fan_in) or tuple(b.shape) != (fan_out, rank)",
        "a.shape[1] != fan_in or b.shape[0] != fan_out",
        "test_adapter", "test_an_adapter_that_would_be_served_wrong_is_refused_with_one_line", {"case": "rank_is_not_r"}, r"accepted.*r=4"),
    "a rank of 0 divides by zero": (
        "adapter.py", "if not 1 <= rank <= max_rank:", "if rank > max_rank:",
        "test_adapter", "test_an_adapter_that_would_be_served_wrong_is_refused_with_one_line", {"case": "rank_zero"}, r"ZeroDivisionError.*not AdapterError"),
    "one shrink per member of a merged group": (
        "merged.py", "            out.index_add_(0, rows, (shrunk[:, j * rank : (j + 1) * rank] @ b[slot].T).to(out.dtype))",
        "            own = (x[rows] @ a_group[slot, j * rank : (j + 1) * rank].T) * scaling[slot].to(x.dtype)\n"
        "            out.index_add_(0, rows, (own @ b[slot].T).to(out.dtype))",
        "test_merged", "test_add_merged_lora_shrinks_a_segment_once_for_the_whole_group", {"widths": (8, 4, 4)},
        r"not one per member"),
    "a stale step served when it holds no adapter": (
        "layer.py", "        segments = self.batch.active(rows.shape[0])\n        if segments is None:\n            return out",
        "        if self.batch.segments is None:\n            return out\n        segments = self.batch.active(rows.shape[0])",
        "test_model", "test_a_step_whose_rows_were_not_set_is_refused_not_served_wrong", {},
        r"stale step"),
    "A and B swapped": (
        "batched.py", "shrunk = x[rows] @ a[slot].T\n        y.index_add_(0, rows, (shrunk @ b[slot].T)",
        "shrunk = x[rows] @ b[slot].T\n        y.index_add_(0, rows, (shrunk @ a[slot].T)",
        "test_batched", "test_add_lora_is_the_row_by_row_definition", {}, r"A and B swapped"),
    "only A transposed": (
        "batched.py", "shrunk = x[rows] @ a[slot].T\n", "shrunk = x[rows] @ a[slot]\n",
        "test_batched", "test_add_lora_is_the_row_by_row_definition", {}, r"A transposed"),
    "the merged delta without the scaling": (
        "merged.py", "shrunk = (x[rows] @ a_group[slot].T) * scaling[slot].to(x.dtype)", "shrunk = x[rows] @ a_group[slot].T",
        "test_merged", "test_add_merged_lora_gives_each_member_its_own_delta", {}, r"scaling"),
}


@pytest.fixture(scope="module")
def lora_setup(tmp_path_factory):
    """Chapter 11's tiny Llama and peft adapters (its conftest's Setup)."""
    return import_planted(CH11 / "conftest.py", "planted_lora_conftest").Setup(tmp_path_factory.mktemp("lora"))


@pytest.mark.parametrize("mistake", list(PLANTS))
def test_a_planted_mistake_fails_its_tasks_test_with_a_message_that_names_it(mistake, tmp_path, monkeypatch, request):
    file, old, new, test_module, test_name, params, message = PLANTS[mistake]
    source = (SOLUTIONS_ROOT / "lora" / file).read_text()
    assert source.count(old) == 1, f"the reference no longer contains {old!r}: update the plant"
    planted = tmp_path / f"planted_{file}"
    planted.write_text(source.replace(old, new))
    module = import_planted(planted, f"planted_lora_{Path(file).stem}_{abs(hash(mistake))}")
    monkeypatch.syspath_prepend(str(CH11))
    tests = import_planted(CH11 / f"{test_module}.py", f"planted_lora_tests_{test_module}")
    for name in dir(tests):  # the test module's names that the planted module defines anew
        if hasattr(module, name) and not name.startswith("_") and name not in ("torch", "np", "pytest", "math", "re"):
            if getattr(getattr(module, name), "__module__", None) == module.__name__:
                monkeypatch.setattr(tests, name, getattr(module, name))
    if test_module in ("test_adapter", "test_model"):
        params = {**params, "lora_setup": request.getfixturevalue("lora_setup")}
        if "case" in params:  # a refusal case, by its name in the test module
            params = {**params, "case": getattr(tests, params["case"]), "tmp_path": tmp_path}
    test = getattr(tests, test_name)
    with pytest.raises((AssertionError, ExceptionGroup)) as failure:  # hypothesis groups distinct failures
        test(**params)
    messages = [str(e) for e in (failure.value.exceptions if isinstance(failure.value, ExceptionGroup) else [failure.value])]
    assert any(re.search(message, m) for m in messages), f"no message names the mistake ({message!r}): {messages}"
