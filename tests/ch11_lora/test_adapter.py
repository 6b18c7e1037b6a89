"""Task 11.1: an adapter saved by peft, read as peft means it, and every adapter we would serve wrong refused.

The oracle is peft itself: `merge_and_unload` adds each adapted module's delta to its weight, so the
delta our adapter implies for a module (scaling * B @ A) must be that difference, and the modules it
does not adapt must be the ones peft leaves alone.
"""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from lora_models import ADAPTERS, edit_config, save_peft_adapter
from safetensors.torch import load_file, save_file

from miniyaie.lora import AdapterError, load_adapter

PARENTS = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
           "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}


def peft_deltas(setup, name) -> dict[tuple[int, str], torch.Tensor]:
    """What peft's merged model adds to every projection of every layer, float64."""
    merged, deltas = setup.merged(name), {}
    for layer, (ours, base) in enumerate(zip(merged.model.layers, setup.base.model.layers)):
        for module, parent in PARENTS.items():
            after = getattr(getattr(ours, parent), module).weight.detach().double()
            before = getattr(getattr(base, parent), module).weight.detach().double()
            deltas[(layer, module)] = after - before
    return deltas


def name_the_mistake(got: torch.Tensor, want: torch.Tensor, settings: dict) -> str:
    ratio = float((got * want).sum() / (want * want).sum()) if want.abs().max() > 0 else float("nan")
    r = settings["r"]
    if settings.get("use_rslora") and math.isclose(ratio, math.sqrt(r) / r, rel_tol=1e-3):
        return f"scaled by lora_alpha / r, but with use_rslora PEFT scales by alpha / sqrt(r) (r = {r})"
    if not settings.get("use_rslora") and math.isclose(ratio, r / math.sqrt(r), rel_tol=1e-3):
        return f"scaled by lora_alpha / sqrt(r), but without use_rslora PEFT scales by alpha / r (r = {r})"
    if math.isfinite(ratio) and torch.allclose(got, ratio * want, rtol=1e-4, atol=1e-6):
        return f"the delta is peft's times {ratio:.4g}: the scaling is wrong (PEFT: alpha / r, or alpha / sqrt(r) with use_rslora)"
    return "not peft's delta (scaling * B @ A with A = lora_A.weight [r, in], B = lora_B.weight [out, r])"


@pytest.mark.task("11.1")
@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_each_modules_delta_is_what_peft_merges(lora_setup, name):
    adapter = load_adapter(lora_setup.adapters[name], lora_setup.config, max_rank=8)
    settings = ADAPTERS[name]
    assert adapter.name == name, "the adapter's name defaults to its folder's name"
    assert adapter.rank == settings["r"], f"rank: got {adapter.rank}, the config says r={settings['r']}"
    for (layer, module), want in peft_deltas(lora_setup, name).items():
        if module not in settings["target_modules"]:
            assert (layer, module) not in adapter.weights, f"{name} does not adapt layer {layer} {module}, yet it has weights"
            continue
        assert (layer, module) in adapter.weights, f"{name} adapts layer {layer} {module}: missing from adapter.weights"
        a, b = adapter.weights[(layer, module)]
        assert a.dtype == b.dtype == torch.float32, "the adapter's tensors are float32"
        got = adapter.delta(layer, module)
        assert got.shape == want.shape and torch.allclose(got, want, rtol=1e-4, atol=1e-6), \
            f"{name}, layer {layer} {module}: {name_the_mistake(got, want, settings)}"


@pytest.mark.task("11.1")
def test_a_config_without_lora_alpha_takes_pefts_default(lora_setup, tmp_path):
    folder = _copy(lora_setup, tmp_path, "o-down-r1")  # saved with lora_alpha 8, PEFT's default
    config = json.loads((folder / "adapter_config.json").read_text())
    del config["lora_alpha"]
    (folder / "adapter_config.json").write_text(json.dumps(config))
    adapter = load_adapter(folder, lora_setup.config, max_rank=8)
    for (layer, module), want in peft_deltas(lora_setup, "o-down-r1").items():
        if (layer, module) in adapter.weights:
            got = adapter.delta(layer, module)
            assert torch.allclose(got, want, rtol=1e-4, atol=1e-6), \
                f"layer {layer} {module}: without lora_alpha in the config, PEFT's LoraConfig default (8) applies"


@pytest.mark.task("11.1")
def test_target_modules_may_name_a_module_by_its_dotted_path(lora_setup, tmp_path):
    folder = _copy(lora_setup, tmp_path, "qv-r2")
    edit_config(folder, target_modules=["self_attn.q_proj", "v_proj"])  # PEFT matches a name's dotted suffix
    adapter = load_adapter(folder, lora_setup.config, max_rank=8)
    assert adapter.modules == {"q_proj", "v_proj"}, f"the adapter adapts q_proj and v_proj, not {adapter.modules}"


def _copy(setup, tmp_path, name="all-r8"):
    folder = tmp_path / name
    shutil.copytree(setup.adapters[name], folder)
    return folder


def _edit_tensors(folder, change):
    path = folder / "adapter_model.safetensors"
    tensors = load_file(path)
    change(tensors)
    save_file(tensors, path)


def rank_too_high(setup, tmp_path):
    return _copy(setup, tmp_path), 4, r"rank.*8.*4|rank.*4.*8"


def rank_zero(setup, tmp_path):
    folder = _copy(setup, tmp_path)
    edit_config(folder, r=0)
    return folder, 8, r"rank"


def no_rank(setup, tmp_path):
    folder = _copy(setup, tmp_path)
    path = folder / "adapter_config.json"
    config = json.loads(path.read_text())
    del config["r"]
    path.write_text(json.dumps(config))
    return folder, 8, r"\br\b"


def not_lora(setup, tmp_path):
    folder = _copy(setup, tmp_path)
    edit_config(folder, peft_type="IA3")
    return folder, 8, r"IA3|LORA"


def module_not_served(setup, tmp_path):
    folder = _copy(setup, tmp_path, "qv-r2")

    def rename(t):
        for which in "AB":
            t[f"base_model.model.model.layers.0.self_attn.qkv_proj.lora_{which}.weight"] = \
                t.pop(f"base_model.model.model.layers.0.self_attn.q_proj.lora_{which}.weight")
    _edit_tensors(folder, rename)
    return folder, 8, r"qkv_proj"


def targeted_module_missing(setup, tmp_path):
    folder = _copy(setup, tmp_path, "qv-r2")
    _edit_tensors(folder, lambda t: [t.pop(k) for k in list(t) if ".v_proj." in k])
    return folder, 8, r"v_proj"


def targets_a_module_not_served(setup, tmp_path):
    folder = _copy(setup, tmp_path, "qv-r2")
    edit_config(folder, target_modules=["q_proj", "v_proj", "rotary_emb"])
    return folder, 8, r"rotary_emb.*not served"


def no_tensors(setup, tmp_path):
    folder = _copy(setup, tmp_path)
    save_file({}, folder / "adapter_model.safetensors")
    edit_config(folder, target_modules=".*_proj")  # a pattern (PEFT allows one): only the tensors tell
    return folder, 8, r"lora_A|no .*tensor"


def shape_does_not_fit(setup, tmp_path):
    folder = _copy(setup, tmp_path)
    key = "base_model.model.model.layers.1.mlp.down_proj.lora_A.weight"
    _edit_tensors(folder, lambda t: t.__setitem__(key, t[key][:, :48].contiguous()))  # down_proj takes 96 features
    return folder, 8, r"down_proj"


def missing_weights(setup, tmp_path):
    folder = _copy(setup, tmp_path)
    (folder / "adapter_model.safetensors").unlink()
    return folder, 8, r"adapter_model\.safetensors"


def missing_config(setup, tmp_path):
    folder = _copy(setup, tmp_path)
    (folder / "adapter_config.json").unlink()
    return folder, 8, r"adapter_config\.json"


def unserved_module(setup, tmp_path):
    folder = tmp_path / "head"
    save_peft_adapter(setup.base, folder, 9, r=2, lora_alpha=4, target_modules=["q_proj", "lm_head"])
    return folder, 8, r"lm_head"


def dora(setup, tmp_path):
    folder = _copy(setup, tmp_path)
    edit_config(folder, use_dora=True)
    return folder, 8, r"(?i)dora"


def bias(setup, tmp_path):
    folder = _copy(setup, tmp_path)
    edit_config(folder, bias="all")
    return folder, 8, r"bias"


def fan_in_fan_out(setup, tmp_path):
    folder = _copy(setup, tmp_path)
    edit_config(folder, fan_in_fan_out=True)
    return folder, 8, r"fan_in_fan_out"


def half_a_pair(setup, tmp_path):
    folder = _copy(setup, tmp_path)
    _edit_tensors(folder, lambda t: t.pop("base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight"))
    return folder, 8, r"k_proj"


def layer_the_model_lacks(setup, tmp_path):  # the model has layers 0 and 1
    folder = _copy(setup, tmp_path, "qv-r2")

    def rename(t):
        for which in "AB":
            t[f"base_model.model.model.layers.2.self_attn.q_proj.lora_{which}.weight"] = \
                t.pop(f"base_model.model.model.layers.1.self_attn.q_proj.lora_{which}.weight")
    _edit_tensors(folder, rename)
    return folder, 8, r"layer"


def rank_is_not_r(setup, tmp_path):
    """tensors of rank 8 under a config that says r=4"""
    folder = _copy(setup, tmp_path)
    edit_config(folder, r=4)
    return folder, 8, r"rank"


def wrong_parent(setup, tmp_path):
    """q_proj's tensors under mlp (layers.0.mlp.q_proj), a module the model does not have"""
    folder = _copy(setup, tmp_path, "qv-r2")

    def rename(t):
        for which in "AB":
            t[f"base_model.model.model.layers.0.mlp.q_proj.lora_{which}.weight"] = \
                t.pop(f"base_model.model.model.layers.0.self_attn.q_proj.lora_{which}.weight")
    _edit_tensors(folder, rename)
    return folder, 8, r"mlp\.q_proj"


def rank_pattern(setup, tmp_path):
    """a per-module rank (rank_pattern): served at r, it would be wrong"""
    folder = _copy(setup, tmp_path)
    edit_config(folder, rank_pattern={"q_proj": 4})
    return folder, 8, r"rank_pattern"


def alpha_pattern(setup, tmp_path):
    """a per-module alpha (alpha_pattern): served at lora_alpha, its scaling would be wrong"""
    folder = _copy(setup, tmp_path)
    edit_config(folder, alpha_pattern={"v_proj": 32})
    return folder, 8, r"alpha_pattern"


def modules_to_save(setup, tmp_path):
    """modules_to_save: whole modules replaced by the adapter's copies"""
    folder = _copy(setup, tmp_path)
    edit_config(folder, modules_to_save=["lm_head"])
    return folder, 8, r"modules_to_save"


def lora_bias(setup, tmp_path):
    """lora_bias: a bias on lora_B"""
    folder = _copy(setup, tmp_path)
    edit_config(folder, lora_bias=True)
    return folder, 8, r"lora_bias"


REFUSALS = [rank_too_high, rank_zero, rank_is_not_r, wrong_parent, rank_pattern, alpha_pattern, modules_to_save, lora_bias, no_rank, not_lora, shape_does_not_fit, unserved_module, module_not_served,
            targeted_module_missing, targets_a_module_not_served, no_tensors, dora, bias, fan_in_fan_out, half_a_pair,
            layer_the_model_lacks]
FILE_REFUSALS = [missing_weights, missing_config]  # refused by the provided read_adapter_files


def _refused(lora_setup, tmp_path, case):
    import re

    folder, max_rank, what = case(lora_setup, tmp_path)
    problem = case.__doc__ or case.__name__.replace("_", " ")
    try:
        load_adapter(folder, lora_setup.config, max_rank=max_rank, name="customer-7")
    except AdapterError as error:
        refused = error
    except Exception as error:  # noqa: BLE001 (any other exception is the failure to name)
        raise AssertionError(f"{problem}: refused with {type(error).__name__} ({error}), not AdapterError's one line "
                             "naming the adapter") from error
    else:
        raise AssertionError(f"accepted an adapter it would serve wrong ({problem}): refuse it with AdapterError")
    message = str(refused)
    assert isinstance(refused, ValueError), "AdapterError is a ValueError"
    assert message.startswith("adapter 'customer-7'"), f"the message names the adapter first: {message!r}"
    assert "\n" not in message, f"one line: {message!r}"
    assert re.search(what, message), f"the message says what is wrong ({what!r}): {message!r}"


@pytest.mark.task("11.1")
@pytest.mark.parametrize("case", REFUSALS, ids=lambda case: case.__name__)
def test_an_adapter_that_would_be_served_wrong_is_refused_with_one_line(lora_setup, tmp_path, case):
    _refused(lora_setup, tmp_path, case)


@pytest.mark.ungraded
@pytest.mark.parametrize("case", FILE_REFUSALS, ids=lambda case: case.__name__)
def test_a_missing_file_is_refused_with_one_line(lora_setup, tmp_path, case):
    _refused(lora_setup, tmp_path, case)
