"""What a request asks of the sampler and of the stopping rules, validated once at the door.

Every field is checked in `__post_init__`; a bad value raises
InvalidRequestError naming the parameter and its allowed range, before the
request touches the engine. `generation_config_defaults` reads the
defaults a model's authors recommend (a server uses them, chapter 6).
"""

from __future__ import annotations

import json
import math
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

        # Nudge: anything can arrive; some of Python's numbers are not numbers in this table's sense.
        # Hint 1: Parameters come from JSON bodies and keyword arguments, so anything can arrive.
        #   Check the type first, then the range. True is an int equal to 1 (n=True must be
        #   refused); float("nan") compares false to everything, so a rule written as "refuse if
        #   value < low or value > high" lets NaN through, while "refuse unless low <= value <=
        #   high" does not; inf is a float but no temperature. Every message names its field,
        #   so that a client (chapter 6) can point at it.
        # Hint 2: Judge each field whole, its kind and then its range, before the next, so that a
        #   range is never compared against a string. Two small checks that return the value they
        #   checked: whole(name) raises unless it is an int and not a bool; number(name) raises
        #   unless it is an int or a float, not a bool, and math.isfinite. Then one check per row
        #   of the table, each written as "refuse unless inside", raising bad(name, rule). seed
        #   and logprobs are checked only when not None; stop is self._validate_stop().
        # Hint 3:
        #   def whole(name): v = getattr(self, name); if isinstance(v, bool) or not isinstance(v, int): raise bad(...); return v
        #   def number(name): ...; if bool or not (int, float) or not math.isfinite(v): raise bad(...); return v
        #   if not 1 <= whole("n") <= MAX_N: raise bad("n", f"must be between 1 and {MAX_N}")
        #   ... one check per row, in the table's order ...
        # BEGIN SOLUTION 5.1: Parameters checked once
        def whole(name: str) -> int:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad(name, "must be a whole number")
            return value

        def number(name: str) -> float:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise bad(name, "must be a finite number")
            return value

        if not 1 <= whole("n") <= MAX_N:
            raise bad("n", f"must be between 1 and {MAX_N}")
        if whole("max_tokens") < 1:
            raise bad("max_tokens", "must be at least 1")
        if not 0 <= whole("min_tokens") <= self.max_tokens:
            raise bad("min_tokens", f"must be between 0 and max_tokens ({self.max_tokens})")
        if not 0 <= number("temperature") <= 100:
            raise bad("temperature", "must be between 0 and 100")
        if whole("top_k") < -1:
            raise bad("top_k", "must be -1 or 0 (off) or a positive number of tokens")
        if not 0 < number("top_p") <= 1:
            raise bad("top_p", "must be in (0, 1]")
        if not 0 <= number("min_p") <= 1:
            raise bad("min_p", "must be in [0, 1]")
        if not 0 < number("repetition_penalty") <= 10:
            raise bad("repetition_penalty", "must be in (0, 10]")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2 <= number(name) <= 2:
                raise bad(name, "must be between -2 and 2")
        if self.seed is not None and not 0 <= whole("seed") < 2**63:
            raise bad("seed", "must be in [0, 2**63)")
        self._validate_stop()
        if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in self.stop_token_ids):
            raise bad("stop_token_ids", "must be non-negative token ids")
        if self.logprobs is not None and not 0 <= whole("logprobs") <= MAX_LOGPROBS:
            raise bad("logprobs", f"must be between 0 and {MAX_LOGPROBS}")
        # END SOLUTION

    def _validate_stop(self) -> None:
        """At most MAX_STOP_STRINGS strings of 1 to MAX_STOP_STRING_LENGTH characters.

        Refused with InvalidRequestError, whose message starts with `rule` and then says what was
        wrong: an item that is not a string (the items' type names, as ['str', 'int']), too many
        strings ("17 strings"), an empty string ("an empty one"), a string too long (the longest
        one's length, "257 characters"). A list wrong in several ways is refused for any one of
        them. The message never echoes the strings themselves.
        """
        rule = f"stop must be at most {MAX_STOP_STRINGS} strings of 1 to {MAX_STOP_STRING_LENGTH} characters each"
        # Nudge: the same rule for every way a stop list can be wrong, and never the strings themselves.
        # Hint 1: A stop list can be wrong four ways: something that is not a string, too many
        #   strings, an empty one (it would match everywhere: every output would be empty), or
        #   one too long (holding back a possible stop string costs its length squared per
        #   token). The message states the rule and what was wrong, but never echoes the
        #   strings: they may be long, and they are the client's text.
        # Hint 2: Check the types first (the other checks call len() on the items), then the count,
        #   then an empty string, then the lengths; raise InvalidRequestError(f"{rule}; got ...")
        #   saying the types of the items, how many strings, "an empty one", or the length of the
        #   longest.
        # Hint 3:
        #   if not all(isinstance(s, str) ...): raise ...(f"{rule}; got {[type(s).__name__ for s in self.stop]}")
        #   if len(self.stop) > MAX_STOP_STRINGS: ...; if "" in self.stop: ...
        #   too_long = [len(s) for s in self.stop if len(s) > MAX_STOP_STRING_LENGTH]; if too_long: ... max(too_long) ...
        # BEGIN SOLUTION 5.1: Parameters checked once
        if not all(isinstance(s, str) for s in self.stop):
            raise InvalidRequestError(f"{rule}; got {[type(s).__name__ for s in self.stop]}")
        if len(self.stop) > MAX_STOP_STRINGS:
            raise InvalidRequestError(f"{rule}; got {len(self.stop)} strings")
        if "" in self.stop:
            raise InvalidRequestError(f"{rule}; got an empty one")
        too_long = [len(s) for s in self.stop if len(s) > MAX_STOP_STRING_LENGTH]
        if too_long:
            raise InvalidRequestError(f"{rule}; got one of {max(too_long)} characters")
        # END SOLUTION
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
