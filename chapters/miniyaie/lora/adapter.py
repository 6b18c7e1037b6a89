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
    # Idea: refuse first, read after; what does PEFT multiply B @ A by, with and without use_rslora?
    # Stuck? `miniyaie hint 11.1` prints hints, one level at a time.
    # TODO(Task 11.1): Reading an adapter and refusing what would be served wrong. Replace this line with your code.
    raise NotImplementedError('Chapter 11, Task 1: Reading an adapter and refusing what would be served wrong — see book/src/ch11_lora.md')
# ANCHOR_END: load_adapter
