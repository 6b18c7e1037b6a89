"""Chapter 5: the engine — scheduler, paged KV memory and model in one loop."""

from miniyaie.engine.config import EngineConfig
from miniyaie.engine.llm_engine import LLMEngine, RequestEvent
from miniyaie.engine.model_runner import ModelRunner

__all__ = ["EngineConfig", "LLMEngine", "RequestEvent", "ModelRunner"]
