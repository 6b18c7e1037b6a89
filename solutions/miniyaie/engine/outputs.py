"""What the engine hands back: whole results and the deltas of a stream (InferenceEngine), and one level
down the token events and step records of LLMEngine."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TopLogprob:
    """One of the most likely tokens at a position (an entry of OpenAI's `top_logprobs`)."""

    token_id: int
    token: str  # its text (engine/token_text.py): U+FFFD where the token holds only part of a character
    logprob: float
    bytes: bytes = b""  # its real bytes: joined over consecutive tokens, they rebuild split characters


@dataclass
class TokenLogprob:
    """A generated token's log-probability and, when asked for, the most likely tokens at its position."""

    token_id: int
    token: str  # its text, as TopLogprob.token
    logprob: float
    top_logprobs: list[TopLogprob] = field(default_factory=list)  # best first
    bytes: bytes = b""  # its real bytes, as TopLogprob.bytes


@dataclass
class CompletionOutput:
    """One completion of a prompt (a request with n > 1 has n of them)."""

    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None  # "stop", "length" or "abort"
    logprobs: list[TokenLogprob] | None = None  # when asked for: one per token of token_ids


@dataclass
class GenerationOutput:
    """The result of one prompt. `text`, `token_ids`, `finish_reason` are completion 0's (the fields a one-completion caller reads)."""

    request_id: str
    prompt: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    cached_tokens: int = 0  # prompt tokens whose K/V came from the prefix cache
    finished: bool = True

    @property
    def text(self) -> str:
        return self.outputs[0].text

    @property
    def token_ids(self) -> list[int]:
        return self.outputs[0].token_ids

    @property
    def finish_reason(self) -> str | None:
        return self.outputs[0].finish_reason

    @property
    def logprobs(self) -> list[TokenLogprob] | None:
        return self.outputs[0].logprobs

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def completion_tokens(self) -> int:
        return sum(len(o.token_ids) for o in self.outputs)


@dataclass
class CompletionDelta:
    """What one step added to one completion of a streamed request."""

    request_id: str
    index: int
    text: str  # new text (may be "" while a character or a possible stop string is held back)
    token_ids: list[int]
    finish_reason: str | None = None
    logprobs: list[TokenLogprob] | None = None


@dataclass(frozen=True)
class RequestEvent:
    """One new token of one completion, as LLMEngine.step() returns it."""

    request_id: str
    token_id: int
    finish_reason: str | None  # "stop", "length", or None while running
    logprob: float | None = None  # when the request asked for logprobs
    top_logprobs: list[tuple[int, float]] | None = None
    cached_tokens: int = 0  # prompt tokens found in the prefix cache at the request's first admission (a resumed request's own work is not counted)
    error: Exception | None = None  # this completion failed in the step (say, its structured-output guide): it has ended


@dataclass(frozen=True)
class StepRecord:
    """What one step did (for traces: see `LLMEngine.on_step` and notebook 5)."""

    step: int
    started: float  # time.perf_counter() when the step began
    seconds: float
    num_seqs: int  # chunks in the batch
    prefill_tokens: int  # prompt tokens computed (incl. recomputation after preemption)
    decode_tokens: int  # one per request decoding
    cached_tokens: int  # prompt tokens of requests admitted this step that came from the prefix cache
    sampled_tokens: int  # new tokens out of this step
    preempted: int
    num_running: int  # after the step
    num_waiting: int
    used_blocks: int
