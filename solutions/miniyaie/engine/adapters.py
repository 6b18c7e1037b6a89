"""Adapters: user hooks around every request, without touching the engine.

An adapter can rewrite the prompt before tokenization (`prepare_prompt`
for plain prompts, `prepare_messages` for chats) and the finished result
before it is returned (`process_output`). Register them with
`InferenceEngine(..., adapters=[...])`; they run in order (output hooks too).
Streamed deltas are not passed through `process_output`: only whole results.
"""

from __future__ import annotations

from miniyaie.engine.outputs import GenerationOutput


class ModelAdapter:
    """Base adapter: every hook returns its input unchanged."""

    def prepare_prompt(self, prompt: str) -> str:
        return prompt

    def prepare_messages(self, messages: list[dict]) -> list[dict]:
        return messages

    def process_output(self, output: GenerationOutput) -> GenerationOutput:
        return output


class SystemPromptAdapter(ModelAdapter):
    """Give every chat a system prompt (unless it brings its own); prefix plain prompts with it."""

    def __init__(self, system_prompt: str, prefix_plain_prompts: bool = False):
        self.system_prompt = system_prompt
        self.prefix_plain_prompts = prefix_plain_prompts

    def prepare_prompt(self, prompt: str) -> str:
        return f"{self.system_prompt}\n\n{prompt}" if self.prefix_plain_prompts else prompt

    def prepare_messages(self, messages: list[dict]) -> list[dict]:
        if messages and messages[0].get("role") == "system":
            return messages
        return [{"role": "system", "content": self.system_prompt}, *messages]


class StripOutputAdapter(ModelAdapter):
    """Strip surrounding whitespace from every completion's text (an output hook)."""

    def process_output(self, output: GenerationOutput) -> GenerationOutput:
        for completion in output.outputs:
            completion.text = completion.text.strip()
        return output
