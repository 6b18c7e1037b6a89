"""A LoRA adapter in PEFT's format, read and checked against the base model it is meant for (Task 11.1).

A fine-tune by LoRA leaves the base weights alone and learns, for some projections W [out, in], two
thin matrices A [r, in] and B [out, r]; the fine-tuned projection is W + scaling * B @ A. PEFT (the
library most adapters are trained with) saves them as a directory: `adapter_config.json` (the rank r,
lora_alpha, use_rslora, the target modules, ...) and `adapter_model.safetensors` (one `lora_A.weight`
and one `lora_B.weight` per adapted module, named after the module's place in the model). An engine
that serves adapters beside the base must refuse, at load time and with one clear line, every adapter
it would otherwise serve wrongly: the request that asked for it gets an error instead of a silent
wrong answer, and nothing already loaded is touched.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from miniyaie.model.config import ModelConfig

CONFIG_FILE, WEIGHTS_FILE = "adapter_config.json", "adapter_model.safetensors"
# The projections an adapter may adapt, by their names in the checkpoint and the model, with their parent.
PROJECTIONS = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
               "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
# `...layers.<N>.<parent>.<module>.lora_<A|B>.weight`, whatever PEFT put in front (base_model.model.model.)
TENSOR_NAME = re.compile(r"(?:^|\.)layers\.(\d+)\.(\w+)\.(\w+)\.lora_([AB])\.weight$")


class AdapterError(ValueError):
    """An adapter the engine refuses; the message names the adapter and says what is wrong first."""


@dataclass
class LoRAAdapter:
    """One adapter, checked against a base model: (layer, module) -> (A [r, in], B [out, r]).

    Every pair has the adapter's one rank r; modules it does not adapt are absent. The fine-tuned
    projection is W + scaling * B @ A.
    """

    name: str
    rank: int
    scaling: float
    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]

    @property
    def modules(self) -> set[str]:
        """The module names (q_proj, ...) it adapts in at least one layer."""
        return {module for _, module in self.weights}

    def delta(self, layer: int, module: str) -> torch.Tensor:
        """What the adapter adds to one projection's weight [out, in], in float64 (a module it adapts)."""
        a, b = self.weights[(layer, module)]
        return self.scaling * (b.double() @ a.double())

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for pair in self.weights.values() for t in pair)


def projection_shapes(config: ModelConfig) -> dict[str, tuple[int, int]]:
    """(in features, out features) of each projection an adapter may adapt, in a model of `config`."""
    hidden, q_width, kv_width = config.hidden_size, config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    inter = config.intermediate_size
    return {"q_proj": (hidden, q_width), "k_proj": (hidden, kv_width), "v_proj": (hidden, kv_width),
            "o_proj": (q_width, hidden), "gate_proj": (hidden, inter), "up_proj": (hidden, inter),
            "down_proj": (inter, hidden)}


def read_adapter_files(path: str | Path, name: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """The adapter's config (a dict) and its tensors by name, or AdapterError when a file is missing or unreadable."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(path)
    if not folder.is_dir():
        raise AdapterError(f"adapter {name!r}: {folder} is not a directory")
    for file in (CONFIG_FILE, WEIGHTS_FILE):
        if not (folder / file).is_file():
            raise AdapterError(f"adapter {name!r}: {folder} has no {file} (PEFT saves {CONFIG_FILE} and {WEIGHTS_FILE})")
    try:
        config = json.loads((folder / CONFIG_FILE).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise AdapterError(f"adapter {name!r}: cannot read {CONFIG_FILE}: {exc}") from None
    try:
        tensors = load_file(str(folder / WEIGHTS_FILE))
    except (OSError, SafetensorError) as exc:
        raise AdapterError(f"adapter {name!r}: cannot read {WEIGHTS_FILE}: {exc}") from None
    if not isinstance(config, dict):
        raise AdapterError(f"adapter {name!r}: {CONFIG_FILE} is not a JSON object")
    return config, tensors


# ANCHOR: load_adapter
def load_adapter(path: str | Path, config: ModelConfig, max_rank: int, name: str | None = None) -> LoRAAdapter:
    """The adapter saved by PEFT in `path`, checked against a base model of `config`; float32 tensors.

    Reads `adapter_config.json`: r, lora_alpha, use_rslora (the scaling of B @ A: PEFT's, which
    depends on use_rslora), and the tensors `...layers.N.<self_attn|mlp>.<module>.lora_A.weight` [r, in]
    and `lora_B.weight` [out, r], for the seven PROJECTIONS. Raises AdapterError, its message starting
    with "adapter '<name>': " and then naming what is wrong (the setting's key, the tensor or module,
    "rank", "not served"), one line, when: a file is missing (read_adapter_files); peft_type is not
    LORA; r is not in 1..max_rank (r = 0 too: refused, never a division by zero); the adapter needs
    what is not served here (use_dora, a bias other than "none", lora_bias, fan_in_fan_out,
    modules_to_save, rank_pattern or alpha_pattern: each named by its key); a tensor belongs to a
    module that is not one of the PROJECTIONS (lm_head, embed_tokens, ...), sits under another parent
    than its module's (layers.0.mlp.q_proj), or is for a layer the model does not have; a module has A
    without B (or B without A); a tensor's shape does not fit its projection (projection_shapes) or
    the rank r (A [r, in], B [out, r]); no tensors at all; target_modules, when a list, names a module
    that is not served (the message says "not served") or one with no tensors. `name` defaults to the
    folder's name.
    Asserted: each module's delta (scaling * B @ A) is what PEFT's merged model adds to its weight.
    """
    name = Path(path).name if name is None else name
    settings, tensors = read_adapter_files(path, name)
    # Nudge: refuse first, read after; what does PEFT multiply B @ A by, with and without use_rslora?
    # Hint 1: An adapter is a promise about the base model: every tensor must land on a projection that
    #   exists, with its shapes. Check the settings that change the arithmetic before the tensors:
    #   DoRA, biases, fan_in_fan_out (weights stored transposed) and per-module ranks or alphas all
    #   change what W + scaling * B @ A means. PEFT's scaling is lora_alpha / r, and with use_rslora
    #   ("rank-stabilised") lora_alpha / sqrt(r).
    # Hint 2: Read r (int), lora_alpha (PEFT's default is 8), use_rslora (default False).
    #   Refuse the unsupported settings, then a rank r outside 1..max_rank. For every tensor name: match TENSOR_NAME
    #   (layer, parent, module, A or B); refuse names that do not match, modules outside PROJECTIONS,
    #   a parent that is not the module's, a layer >= config.num_layers. Collect A and B per
    #   (layer, module); refuse a half pair; check A is [r, in] and B is [out, r] with (in, out)
    #   from projection_shapes(config). Last, a target_modules list (names, possibly dotted: the last
    #   part counts) must name only PROJECTIONS, each with tensors.
    # Hint 3:
    #   r, alpha = int(settings["r"]), float(settings.get("lora_alpha", 8))
    #   refuse peft_type != LORA, use_dora, bias != "none", fan_in_fan_out, modules_to_save, rank/alpha patterns
    #   refuse r outside 1..max_rank
    #   scaling = alpha / sqrt(r) if use_rslora else alpha / r
    #   for key, t in tensors: layer, parent, module, which = TENSOR_NAME.search(key) ...; halves[(layer, module)][which] = t.float()
    #   for (layer, module), pair: A, B = pair["A"], pair["B"]; in, out = shapes[module]
    #       refuse A.shape != (r, in) or B.shape != (out, r)
    #   refuse no weights; if target_modules is a list: refuse names outside PROJECTIONS, or without weights
    #   return LoRAAdapter(name, r, scaling, weights)
    # BEGIN SOLUTION 11.1: Reading an adapter and refusing what would be served wrong
    def refuse(what: str) -> AdapterError:
        return AdapterError(f"adapter {name!r}: {what}")

    if str(settings.get("peft_type", "LORA")).upper() != "LORA":
        raise refuse(f"peft_type is {settings.get('peft_type')!r}; only LORA adapters are served")
    try:
        rank, alpha = int(settings["r"]), float(settings.get("lora_alpha", 8))
    except (KeyError, TypeError, ValueError):
        raise refuse(f"{CONFIG_FILE} has no usable r and lora_alpha") from None
    unsupported = {
        "use_dora": "DoRA (use_dora) is not supported",
        "fan_in_fan_out": "fan_in_fan_out (weights stored transposed, GPT-2 style) is not supported",
        "lora_bias": "a bias on lora_B (lora_bias) is not supported",
        "modules_to_save": f"modules_to_save ({settings.get('modules_to_save')}) replaces whole modules; not supported",
        "rank_pattern": "a per-module rank (rank_pattern) is not supported",
        "alpha_pattern": "a per-module alpha (alpha_pattern) is not supported",
    }
    for key, why in unsupported.items():
        if settings.get(key):
            raise refuse(why)
    if settings.get("bias", "none") != "none":
        raise refuse(f"bias={settings['bias']!r} is not supported (only 'none': the base's biases unchanged)")
    if not 1 <= rank <= max_rank:
        raise refuse(f"rank r={rank} is outside 1..{max_rank} (the maximum rank these slots hold)")
    scaling = alpha / math.sqrt(rank) if settings.get("use_rslora") else alpha / rank
    shapes, halves = projection_shapes(config), {}
    for key, tensor in tensors.items():
        found = TENSOR_NAME.search(key)
        if found is None:
            raise refuse(f"tensor {key} is not a LoRA A/B of a decoder layer's projection; not served")
        layer, parent, module, which = int(found[1]), found[2], found[3], found[4]
        if PROJECTIONS.get(module) != parent:
            raise refuse(f"tensor {key} adapts {parent}.{module}, which is not served "
                         f"(served: {', '.join(sorted(PROJECTIONS))})")
        if layer >= config.num_layers:
            raise refuse(f"tensor {key} is for layer {layer}; the model has {config.num_layers} layers")
        halves.setdefault((layer, module), {})[which] = tensor.float()
    weights = {}
    for (layer, module), pair in sorted(halves.items()):
        if set(pair) != {"A", "B"}:
            raise refuse(f"layer {layer} {module} has lora_{''.join(pair)} without lora_{'B' if 'A' in pair else 'A'}")
        a, b = pair["A"], pair["B"]
        fan_in, fan_out = shapes[module]
        if tuple(a.shape) != (rank, fan_in) or tuple(b.shape) != (fan_out, rank):
            raise refuse(f"layer {layer} {module}: A {tuple(a.shape)} and B {tuple(b.shape)} do not fit "
                         f"the projection ({fan_in} in, {fan_out} out) at rank {rank}: want A ({rank}, {fan_in}), "
                         f"B ({fan_out}, {rank})")
        weights[(layer, module)] = (a.contiguous(), b.contiguous())
    if not weights:
        raise refuse(f"{WEIGHTS_FILE} holds no lora_A/lora_B tensors")
    targets = settings.get("target_modules")
    if isinstance(targets, list):  # names (a string is a pattern PEFT matched: the tensors say what it found)
        named = {target.split(".")[-1] for target in targets}
        if named - set(PROJECTIONS):
            raise refuse(f"targets {', '.join(sorted(named - set(PROJECTIONS)))}, not served "
                         f"(served: {', '.join(sorted(PROJECTIONS))})")
        if named - {module for _, module in weights}:
            raise refuse(f"targets {', '.join(sorted(named - {m for _, m in weights}))} but {WEIGHTS_FILE} has no "
                         "tensors for it (a file cut short?)")
    return LoRAAdapter(name, rank, scaling, weights)
    # END SOLUTION
# ANCHOR_END: load_adapter
