"""A fixed number of adapter slots: every resident adapter's A and B in stacked tensors (Task 11.2).

One batched multiply serves a batch that mixes adapters only if it can index every adapter's weights
by a number: slot s of a stack is adapter s. So the stacks are allocated once, for `num_slots`
adapters of rank up to `max_rank`, and an adapter of a smaller rank is zero-padded: its extra rows of
A and columns of B are zeros, which add nothing. Loading writes one slot, unloading zeroes it; the
step never allocates. S-LoRA and vLLM keep adapters the same way (vLLM's max_loras x max_lora_rank).

Layout, per layer l of the model:
    a[group] [slots, layers, len(group) * max_rank, in]   the group's members' A side by side along the rank
    b[module] [slots, layers, out, max_rank]
    scaling [slots]                                        float32, one per slot
Groups are the projections that read the same input: q/k/v, gate/up, and o and down alone. A member's
A is a view of its group's (`a_of`); the merged projections' one shrink reads the group's A at once
(Task 11.5). The scaling is kept per slot, not folded into B: the stacks then hold the adapter's own
tensors (unloading and reloading is exact, a test can compare them), and the scaling costs one
multiplication per segment: of the rank-wide intermediate, or inside the add that scatters the result.
"""

from __future__ import annotations

import torch

from miniyaie.lora.adapter import AdapterError, LoRAAdapter, projection_shapes
from miniyaie.model.config import ModelConfig

NO_ADAPTER = -1  # a row's slot when its request has no adapter: the base model alone
GROUPS = (("q_proj", "k_proj", "v_proj"), ("o_proj",), ("gate_proj", "up_proj"), ("down_proj",))


class LoRASlots:
    """Stacked A/B of `num_slots` adapters of rank <= max_rank for a model of `config` (all seven projections)."""

    def __init__(self, config: ModelConfig, num_slots: int, max_rank: int, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu"):
        if num_slots < 1 or max_rank < 1:
            raise ValueError(f"need at least one slot and rank 1 (got {num_slots} slots, max rank {max_rank})")
        self.config, self.num_slots, self.max_rank = config, num_slots, max_rank
        self.shapes = projection_shapes(config)
        layers = config.num_layers
        make = lambda *shape: torch.zeros(num_slots, layers, *shape, dtype=dtype, device=device)  # noqa: E731
        self.a = {group: make(len(group) * max_rank, self.shapes[group[0]][0]) for group in GROUPS}
        self.b = {module: make(out, max_rank) for module, (_, out) in self.shapes.items()}
        self.scaling = torch.zeros(num_slots, dtype=torch.float32, device=device)
        self.names: list[str | None] = [None] * num_slots  # the adapter in each slot

    def group_of(self, module: str) -> tuple[str, ...]:
        return next(group for group in GROUPS if module in group)

    def a_of(self, module: str) -> torch.Tensor:
        """Module's A in every slot and layer: a view [slots, layers, max_rank, in] of its group's stack."""
        group = self.group_of(module)
        start = group.index(module) * self.max_rank
        return self.a[group][:, :, start : start + self.max_rank]

    def slot_of(self, name: str) -> int | None:
        """The slot holding the adapter called `name`, or None."""
        return self.names.index(name) if name in self.names else None

    @property
    def bytes_per_slot(self) -> int:
        """What one slot takes: every module's A and B at max_rank, every layer, and its scaling."""
        tensors = [*self.a.values(), *self.b.values()]
        return sum(t[0].numel() * t.element_size() for t in tensors) + self.scaling.element_size()

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.num_slots:
            raise IndexError(f"slot {slot} does not exist: slots are 0..{self.num_slots - 1} ({NO_ADAPTER} means none)")

    # ANCHOR: load_slot
    def load(self, slot: int, adapter: LoRAAdapter) -> None:
        """Put `adapter` into `slot`, replacing whatever the slot held.

        Afterwards, for every layer l and module m, the slot's A (a_of(m)[slot, l]) and B
        (b[m][slot, l]) are the adapter's, zero-padded to max_rank, and zero where the adapter does
        not adapt (l, m); scaling[slot] is the adapter's, and names[slot] its name. Nothing of the
        slot's previous adapter may survive. Raises AdapterError (naming the adapter) when its rank
        is above max_rank or its shapes do not fit these slots' model, IndexError for a slot out of
        range; either way the slot is left as it was.
        Asserted: the batched multiply over the slot gives the adapter's delta, after any sequence of loads,
        from the adapter's own A, B and scaling (B is not pre-multiplied); a refused load changes nothing.
        """
        self._check_slot(slot)
        # Nudge: a slot is reused: adapters of other ranks and other modules are loaded into it, in any order.
        # Hint 1: A smaller rank fills only the first r rows of A and columns of B; a module the new
        #   adapter does not adapt is not written at all. Whatever is left there from the previous
        #   adapter is still multiplied in: zero the whole slot first, but only after every check
        #   has passed, so that a refused adapter leaves the slot as it was.
        # Hint 2: Check the rank against max_rank and each pair's shapes against a_of / b (in and
        #   out features) first. Then zero the slot in every A group and every B, and copy each
        #   (layer, module) pair into the first r rows of A and first r columns of B; set the
        #   scaling and the name.
        # Hint 3:
        #   refuse rank > max_rank; for each (l, m), (A, B): refuse A.shape[1] != in or B.shape[0] != out
        #   for t in a.values() and b.values(): t[slot].zero_()
        #   for (l, m), (A, B): a_of(m)[slot, l, :r] = A; b[m][slot, l, :, :r] = B
        #   scaling[slot] = adapter.scaling; names[slot] = adapter.name
        # BEGIN SOLUTION 11.2: Adapters in slots
        rank = adapter.rank
        if rank > self.max_rank:
            raise AdapterError(f"adapter {adapter.name!r}: rank {rank} is above the slots' maximum rank {self.max_rank}")
        for (layer, module), (a, b) in adapter.weights.items():
            fan_in, fan_out = self.shapes[module]
            if layer >= self.config.num_layers or a.shape != (rank, fan_in) or b.shape != (fan_out, rank):
                raise AdapterError(f"adapter {adapter.name!r}: layer {layer} {module} (A {tuple(a.shape)}, B "
                                   f"{tuple(b.shape)}) does not fit these slots' model")
        for stack in (*self.a.values(), *self.b.values()):
            stack[slot].zero_()
        for (layer, module), (a, b) in adapter.weights.items():
            self.a_of(module)[slot, layer, :rank] = a
            self.b[module][slot, layer, :, :rank] = b
        self.scaling[slot] = adapter.scaling
        self.names[slot] = adapter.name
        # END SOLUTION
    # ANCHOR_END: load_slot

    def unload(self, slot: int) -> None:
        """Empty `slot`: afterwards it adds nothing to any row pointed at it (by mistake) and has no name.

        Its A and B are zeros, as in a slot never loaded; its scaling may stay (it multiplies zeros)."""
        self._check_slot(slot)
        # Nudge: what must a row that still points at an emptied slot get?
        # Hint 1: An empty slot is a slot of zeros: whatever multiplies it adds nothing.
        # Hint 2: Zero the slot in every A group and every B, and forget its name.
        # Hint 3:
        #   for t in a.values() and b.values(): t[slot].zero_()
        #   names[slot] = None
        # BEGIN SOLUTION 11.2: Adapters in slots
        for stack in (*self.a.values(), *self.b.values()):
            stack[slot].zero_()
        self.names[slot] = None
        # END SOLUTION
