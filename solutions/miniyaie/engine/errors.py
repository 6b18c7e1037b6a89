"""Typed errors: a caller can tell a bad request from a full engine from a missing model.

    EngineError
    ├── InvalidRequestError     the request is wrong (a parameter out of range, a prompt too long)
    ├── ResourceExhaustedError  the request is fine but can never fit in this engine's KV cache
    ├── ModelLoadError          the model cannot be found or read (also chapter 0's ModelLoadError)
    └── RequestFailedError      the engine failed while running the request (the other requests go on)

InvalidRequestError and ResourceExhaustedError are also ValueErrors, so code
written against chapters 0-3 (which raise ValueError) keeps working.
"""

from __future__ import annotations

from miniyaie.model import ModelLoadError as _ChapterZeroModelLoadError
from miniyaie.model import PromptTooLongError


class EngineError(Exception):
    """Base class of every error the engine raises on purpose."""


class InvalidRequestError(EngineError, ValueError):
    """A request the engine refuses; the message names the parameter and its limit."""


class PromptTooLongRequestError(InvalidRequestError, PromptTooLongError):
    """The prompt leaves no room in the model's context (also chapter 0's PromptTooLongError)."""


class ResourceExhaustedError(EngineError, ValueError):
    """A request that could never fit in the KV cache (or another hard limit) of this engine."""


class ModelLoadError(EngineError, _ChapterZeroModelLoadError):
    """A model that cannot be found or read; `except` chapter 0's ModelLoadError catches it too."""


class RequestFailedError(EngineError):
    """Running this request raised (its step, its detokenizer, its stop strings...); the request was ended
    and its memory returned, and the engine serves on."""
