"""The names a server answers to: the base model's and each LoRA adapter's (chapter 11).

A request's `model` picks what runs: one of the base model's served names
(no adapter), or an adapter's name, as with vLLM's `--lora-modules`. What a
name picks travels as the request's default SamplingParams (their `adapter`
field), so the routes build every request's parameters the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from miniyaie.engine import EngineError, SamplingParams


class ServedModels:
    """`defaults_for(model)`: a request's defaults for the name it asked for; `listing()`: /v1/models' data.

    `not_found(message)` makes the error for a name not served (the server's 404: the server knows HTTP, this does not)."""

    def __init__(self, names: Sequence[str], adapters: Sequence[str], defaults: SamplingParams,
                 not_found: Callable[[str], Exception] = LookupError):
        clash = sorted(set(names) & set(adapters))
        if clash:
            raise EngineError(f"the LoRA adapter name {clash[0]!r} is also the base model's served name: a request "
                              "could not say which it means; rename the adapter")
        self.names, self.adapters, self.not_found = tuple(names), tuple(adapters), not_found
        self._defaults = {**{n: defaults.with_updates(adapter=None) for n in names},
                          **{a: defaults.with_updates(adapter=a) for a in adapters}}

    def defaults_for(self, model: str) -> SamplingParams:
        """The defaults of a request for `model`, its adapter set (None: the base model); a 404 for a name not served."""
        if model not in self._defaults:
            raise self.not_found(f"model {model!r} is not served here; try one of: {', '.join(self._defaults)}")
        return self._defaults[model]

    def listing(self) -> list[dict]:
        """OpenAI's model objects, the base model's names first; an adapter's parent is the base model, as in vLLM."""
        parents = [(n, None) for n in self.names] + [(a, self.names[0]) for a in self.adapters]
        return [{"id": n, "object": "model", "created": 0, "owned_by": "miniyaie", "parent": p} for n, p in parents]
