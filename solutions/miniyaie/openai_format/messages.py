"""Chat messages in: roles, content (a string or OpenAI's list of text parts) and text that is valid Unicode."""

from __future__ import annotations


ROLES = ("system", "user", "assistant", "tool", "developer")
PART_SEPARATOR = "\n"  # how text parts are joined into one content string (as vLLM does)


class MessageError(ValueError):
    """Text or messages OpenAI's shapes cannot carry (the engine raises it again as its MessageError)."""


def check_text(text: str, where: str) -> str:
    """`text` if it is valid Unicode; MessageError naming `where` if not.

    JSON can carry half of a surrogate pair ("a\\ud800b" parses to a Python
    string); no tokenizer can encode it, and no UTF-8 reply can quote it.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise MessageError(
            f"{where} is not valid Unicode: a lone surrogate ({ascii(text[exc.start])}) at character {exc.start}"
        ) from None
    return text


def content_text(content, where: str = "content") -> str:
    """A message's content as one string: a string as it is, a list of text parts joined with newlines.

    Other part types (image_url, input_audio, file, ...) need a model that
    reads them: they are refused with an error that names the type.
    """
    if isinstance(content, str):
        return check_text(content, where)
    if not isinstance(content, (list, tuple)):
        raise MessageError(f"{where} must be a string or a list of text parts, got {type(content).__name__}")
    texts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text":
            what = f"type {kind!r}" if isinstance(kind, str) else "no type"
            raise MessageError(
                f"{where}[{i}] is a content part of {what}: this server reads text parts only "
                "({\"type\": \"text\", \"text\": ...})"
            )
        if not isinstance(part.get("text"), str):
            raise MessageError(f"{where}[{i}] is a text part without a string 'text'")
        texts.append(check_text(part["text"], f"{where}[{i}].text"))
    return PART_SEPARATOR.join(texts)


def check_messages(messages) -> list[dict]:
    """The messages as plain {"role", "content"} dicts with string content; MessageError names the first bad one."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise MessageError("messages must be a non-empty list of {'role': ..., 'content': ...}")
    checked = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise MessageError(f"messages[{i}] must be a dict with 'role' and 'content'")
        role = message.get("role")
        if role not in ROLES:
            raise MessageError(f"messages[{i}].role must be one of {', '.join(ROLES)}, got {role!r}")
        checked.append({"role": role, "content": content_text(message.get("content"), f"messages[{i}].content")})
    return checked
