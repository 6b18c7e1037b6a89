"""What a request asks of the sampler and of the stopping rules, validated once at the door.

Every field is checked in `__post_init__`; a bad value raises
InvalidRequestError naming the parameter and its allowed range, before the
request touches the engine. `generation_config_defaults` reads the
defaults a model's authors recommend (a server uses them, chapter 6).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from pathlib import Path

from miniyaie.engine.errors import InvalidRequestError, ModelLoadError
from miniyaie.model import SamplingParams as BasicSamplingParams

MAX_N = 16
MAX_LOGPROBS = 20
MAX_STOP_STRINGS = 16
MAX_STOP_STRING_LENGTH = 256  # characters: holding back a possible stop string costs O(length^2) per token


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1  # completions per prompt (they share the prompt's KV blocks)
    max_tokens: int = 256  # new tokens at most (also capped by the model's context)
    min_tokens: int = 0  # end-of-sequence and stop tokens are masked until this many were generated
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # keep the k most likely tokens; 0 or -1 = all
    top_p: float = 1.0  # keep the smallest set whose probability reaches top_p
    min_p: float = 0.0  # drop tokens less likely than min_p * the most likely one
    repetition_penalty: float = 1.0  # >1 discourages every token seen in prompt or output
    presence_penalty: float = 0.0  # subtracted once from every token already generated
    frequency_penalty: float = 0.0  # subtracted per occurrence in the generated tokens
    seed: int | None = None  # same seed, same tokens, whatever else is in the batch
    stop: tuple[str, ...] = ()  # strings that end the output (cut from the text)
    stop_token_ids: tuple[int, ...] = ()  # tokens that end the output (besides end-of-sequence)
    ignore_eos: bool = False  # keep going past end-of-sequence (benchmarks)
    logprobs: int | None = None  # None: none; 0: the chosen token's; k: plus the k most likely
    skip_special_tokens: bool = True  # leave special tokens out of the text
    # Structured output (chapter 8), at most one: the whole output matches a regex, a JSON schema
    # (a dict or its JSON text; "json_object" for any JSON object), or one of a few strings.
    regex: str | None = None
    json_schema: dict | str | None = None
    choice: tuple[str, ...] | None = None
    jump_forward: bool = True  # append the text a pattern forces without asking the model
    # The LoRA adapter to run with (chapter 11): one of the engine's lora_adapters by name; None: the base model
    adapter: str | None = None

    def __post_init__(self):
        # accept a single stop string and any sequences; store tuples so params stay hashable
        stop = (self.stop,) if isinstance(self.stop, str) else _as_tuple("stop", self.stop, "a string or a list of strings")
        object.__setattr__(self, "stop", stop)
        object.__setattr__(self, "stop_token_ids", _as_tuple("stop_token_ids", self.stop_token_ids, "a list of token ids"))
        if self.choice is not None and not isinstance(self.choice, str):
            object.__setattr__(self, "choice", tuple(self.choice))
        if isinstance(self.json_schema, dict):  # kept as text: SamplingParams stays hashable
            object.__setattr__(self, "json_schema", json.dumps(self.json_schema))
        self._validate()
        self._validate_structured()

    # ANCHOR: validate
    def _validate(self) -> None:
        """Refuse, with InvalidRequestError, a request with any field whose value is outside its domain.

        Values arrive from JSON bodies and keyword arguments, so any Python value can arrive in
        any field. Two kinds of number: whole numbers (n, max_tokens, min_tokens, top_k, seed,
        logprobs, each of stop_token_ids) are Python ints; real numbers (temperature, top_p,
        min_p and the three penalties) are ints or floats on the real line (finite). JSON's
        true and false are answers, not numbers, wherever Python stores them. The ranges:
            n                      1 .. MAX_N
            max_tokens             at least 1
            min_tokens             0 .. max_tokens
            temperature            0 .. 100
            top_k                  -1, 0 (both mean off) or more
            top_p                  (0, 1]
            min_p                  [0, 1]
            repetition_penalty     (0, 10]
            presence_penalty, frequency_penalty   -2 .. 2
            seed                   None, or a whole number in [0, 2**63)
            stop                   self._validate_stop() (below, yours too)
            stop_token_ids         whole numbers >= 0
            logprobs               None, or a whole number in 0 .. MAX_LOGPROBS
        The message starts with the name of a field that is wrong (with several wrong, any one
        of them) and says its rule and the value given (bad(name, rule) builds it). A value of
        the wrong kind is refused, never compared or converted: it must not raise anything but
        InvalidRequestError.
        """
        def bad(name: str, rule: str) -> InvalidRequestError:
            return InvalidRequestError(f"{name} {rule}, got {getattr(self, name)!r}")

        # Idea: anything can arrive; some of Python's numbers are not numbers in this table's sense.
        # Stuck? `miniyaie hint 5.1` prints hints, one level at a time.
        # TODO(Task 5.1): Parameters checked once. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 1: Parameters checked once — see book/src/ch05_engine.md')

    def _validate_stop(self) -> None:
        """At most MAX_STOP_STRINGS strings of 1 to MAX_STOP_STRING_LENGTH characters.

        Refused with InvalidRequestError, whose message starts with `rule` and then says what was
        wrong: an item that is not a string (the items' type names, as ['str', 'int']), too many
        strings ("17 strings"), an empty string ("an empty one"), a string too long (the longest
        one's length, "257 characters"). A list wrong in several ways is refused for any one of
        them. The message never echoes the strings themselves.
        """
        rule = f"stop must be at most {MAX_STOP_STRINGS} strings of 1 to {MAX_STOP_STRING_LENGTH} characters each"
        # Idea: the same rule for every way a stop list can be wrong, and never the strings themselves.
        # Stuck? `miniyaie hint 5.1` prints hints, one level at a time.
        # TODO(Task 5.1): Parameters checked once. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 1: Parameters checked once — see book/src/ch05_engine.md')
    # ANCHOR_END: validate

    def _validate_structured(self) -> None:
        if self.adapter is not None and not (isinstance(self.adapter, str) and self.adapter):
            raise InvalidRequestError("adapter must be a LoRA adapter's name (a non-empty string) or None")
        given = [name for name in ("regex", "json_schema", "choice") if getattr(self, name) is not None]
        if len(given) > 1:
            raise InvalidRequestError(f"give at most one of regex, json_schema and choice, got {' and '.join(given)}")
        if self.regex is not None and not (isinstance(self.regex, str) and self.regex):
            raise InvalidRequestError("regex must be a non-empty string")
        if self.json_schema is not None and not isinstance(self.json_schema, str):
            raise InvalidRequestError("json_schema must be a JSON schema (an object) or its JSON text")
        if self.choice is not None and (isinstance(self.choice, str) or not self.choice
                                        or not all(isinstance(c, str) and c for c in self.choice)):
            raise InvalidRequestError("choice must be a non-empty list of non-empty strings")

    @property
    def structured(self) -> bool:
        """Whether the output is constrained (regex, json_schema or choice)."""
        return self.regex is not None or self.json_schema is not None or self.choice is not None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def with_updates(self, **changes) -> SamplingParams:
        """A copy with some fields changed (validated); unknown names are an InvalidRequestError."""
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            raise InvalidRequestError(f"unknown sampling parameter(s): {', '.join(unknown)}")
        return replace(self, **changes)

    @classmethod
    def coerce(cls, params: SamplingParams | BasicSamplingParams | None) -> SamplingParams:
        """Chapter 0's SamplingParams (what chapters 1-3 pass to LLMEngine) as this class."""
        if params is None or isinstance(params, cls):
            return params or cls()
        if isinstance(params, BasicSamplingParams):
            return cls(
                max_tokens=params.max_tokens, temperature=params.temperature, top_p=params.top_p,
                seed=params.seed, ignore_eos=params.ignore_eos,
            )
        raise InvalidRequestError(f"sampling_params must be a SamplingParams, got {type(params).__name__}")


def _as_tuple(name: str, value, what: str) -> tuple:
    """A list-like field as a tuple; anything else (a number, a dict) is the client's mistake."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise InvalidRequestError(f"{name} must be {what}, got {type(value).__name__}")
    return tuple(value)


GENERATION_CONFIG_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")  # the ones vLLM reads


def generation_config_defaults(model_dir: str | Path) -> dict:
    """The sampling fields that the model's generation_config.json sets: its authors' recommended defaults.

    Only the keys present count ({} without the file). A server uses them
    for the fields a request leaves out, as vLLM does.
    """
    path = Path(model_dir) / "generation_config.json"
    if not path.is_file():
        return {}
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{path} cannot be read as JSON: {exc}") from None
    found = {name: config[name] for name in GENERATION_CONFIG_FIELDS if config.get(name) is not None}
    try:
        SamplingParams(**found)
    except InvalidRequestError as exc:
        raise ModelLoadError(f"{path}: {exc}") from None
    return found
