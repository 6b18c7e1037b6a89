"""OpenAI's wire shapes, in one place: what comes in (messages) and what goes out (objects and chunks).

    messages      check_messages, content_text, check_text     chat messages in, validated
    common        completion_id, text_completion_id, usage      what every answer carries
    chat          chat_completion, ChatChunker                  "chat.completion" and its chunks
    completions   text_completion, CompletionChunker            "text_completion" and its chunks

It sits below the engine because data flows down: the engine's own
`chat_completion*` conveniences return these shapes, and chapter 6's
server imports them from here.
"""

from miniyaie.openai_format.chat import ChatChunker, chat_completion, chat_logprobs
from miniyaie.openai_format.common import completion_id, text_completion_id, usage
from miniyaie.openai_format.completions import CompletionChunker, completion_logprobs, text_completion
from miniyaie.openai_format.messages import ROLES, MessageError, check_messages, check_text, content_text

__all__ = [
    "check_messages", "content_text", "check_text", "ROLES", "MessageError",
    "completion_id", "text_completion_id", "usage",
    "chat_completion", "chat_logprobs", "ChatChunker",
    "text_completion", "completion_logprobs", "CompletionChunker",
]
