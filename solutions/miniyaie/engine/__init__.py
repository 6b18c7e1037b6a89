"""Chapter 5: the engine — scheduler, paged KV memory and model in one loop, and its public API.

Public API (stable; chapter 6's server uses exactly this):

    engine = InferenceEngine(model="smollm2" | "path/to/hf-dir" | "org/hub-id" | LoadedModel,
                             config=EngineConfig(...), sampling_defaults=SamplingParams(...),
                             adapters=[SystemPromptAdapter("...")])

    engine.generate(prompts, sampling_params=None, **params)  -> GenerationOutput (str in) | list (list in)
        GenerationOutput: request_id, prompt, prompt_token_ids, outputs[CompletionOutput], cached_tokens,
        and completion 0's text, token_ids, finish_reason ("stop" | "length" | "abort"), logprobs;
        prompt_tokens, completion_tokens
    engine.generate_text(prompts, ...)                        -> str | list[str]
    engine.generate_stream(prompt, ..., request_id=None)      -> Iterator[str]            text deltas
    engine.stream(prompt, ...)                                -> Iterator[CompletionDelta | GenerationOutput]
    await engine.generate_async(prompt, ...)                  -> GenerationOutput
    engine.generate_stream_async(prompt, ...)                 -> AsyncIterator[str]
    engine.stream_async(prompt, ...)                          -> AsyncIterator[CompletionDelta | GenerationOutput]
    engine.abort(request_id)                                  -> bool (any thread; caller sees finish_reason "abort")
    engine.chat_completion(messages, ...)                     -> dict  OpenAI "chat.completion"
    engine.chat_completion_stream(messages, ..., include_usage=False) -> Iterator[dict]  "chat.completion.chunk"
    await engine.chat_completion_async(messages, ...)         -> dict
    engine.chat_completion_stream_async(messages, ...)        -> AsyncIterator[dict]
    engine.render_chat(messages)                              -> (prompt text, token ids)
    engine.encode(prompt) / engine.context_length             -> token ids (adapters applied) / context in tokens
    engine.check_request(prompt_token_ids, ...)               -> SamplingParams, or raises what submitting would
    engine.prepare(prompt, ..., prompt_token_ids=None, cancel=None) -> PreparedRequest (any thread: the slow half)
    engine.submit_prepared([prepared], [request_id])          -> [RequestStream] (quick: an event loop may call it)
    engine.release(prepared)                                  -> None (a prepared request that will not be submitted)
    engine.get_stats()                                        -> dict of counters (loop_alive, loop_error too)
    engine.adapter_names()                                    -> list[str]  the LoRA adapters a request may name
    engine.check_health()                                     -> None, or EngineError if it can no longer serve
    engine.close() / with InferenceEngine(...) as engine: ...

`**params` are SamplingParams fields (n, max_tokens, min_tokens, temperature, top_k, top_p, min_p,
repetition_penalty, presence_penalty, frequency_penalty, seed, stop, stop_token_ids, ignore_eos,
logprobs, skip_special_tokens, adapter: a LoRA adapter of lora_adapters, chapter 11); unknown names raise
InvalidRequestError.
Errors: EngineError ⊃ InvalidRequestError, ResourceExhaustedError, ModelLoadError, RequestFailedError.
Closing a stream (sync or async) before its end aborts the request. A fault in one request fails that
request alone (RequestFailedError); the others go on.

LLMEngine is the step-level core in token ids (add_request / step / abort), used by chapters 2-3.
"""

from miniyaie.engine.adapters import ModelAdapter, StripOutputAdapter, SystemPromptAdapter
from miniyaie.engine.config import EngineConfig
from miniyaie.engine.errors import (
    EngineError,
    InvalidRequestError,
    ModelLoadError,
    RequestFailedError,
    ResourceExhaustedError,
)
from miniyaie.engine.inference_engine import InferenceEngine
from miniyaie.engine.llm_engine import LLMEngine
from miniyaie.engine.model_runner import ModelRunner
from miniyaie.engine.outputs import (
    CompletionDelta,
    CompletionOutput,
    GenerationOutput,
    RequestEvent,
    StepRecord,
    TokenLogprob,
)
from miniyaie.engine.sampler import Sampler
from miniyaie.engine.sampling_params import SamplingParams

__all__ = [
    "InferenceEngine", "EngineConfig", "SamplingParams",
    "GenerationOutput", "CompletionOutput", "CompletionDelta", "TokenLogprob",
    "EngineError", "InvalidRequestError", "ResourceExhaustedError", "ModelLoadError", "RequestFailedError",
    "ModelAdapter", "SystemPromptAdapter", "StripOutputAdapter",
    "LLMEngine", "RequestEvent", "StepRecord", "ModelRunner", "Sampler",
]
