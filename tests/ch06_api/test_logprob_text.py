"""Logprobs on the wire name tokens by their text and real bytes, as OpenAI and vLLM do, not by the
tokenizer's symbols (how a token is spelled is Task 5.13's, tested in tests/ch05_engine/test_token_bytes.py)."""

import pytest
from server_helpers import MODEL

pytestmark = [pytest.mark.task(f"6.{n}") for n in range(1, 9)]  # end to end, but for own marks


@pytest.mark.ungraded
def test_engine_logprobs_carry_each_tokens_text_and_bytes(served):
    engine, _ = served
    tokenizer = engine.tokenizer
    result = engine.generate("Once upon a time", max_tokens=24, ignore_eos=True, logprobs=3)
    entries = result.logprobs
    assert [e.token_id for e in entries] == result.token_ids
    joined = b"".join(e.bytes for e in entries)
    assert joined.decode("utf-8", errors="replace") == tokenizer.decode(result.token_ids, skip_special_tokens=False)
    for entry in entries:
        assert entry.token == entry.bytes.decode("utf-8", errors="replace")
        assert len(entry.top_logprobs) == 3 and entry.top_logprobs[0].token_id == entry.token_id  # greedy
        assert (entry.top_logprobs[0].token, entry.top_logprobs[0].bytes) == (entry.token, entry.bytes)
        for top in entry.top_logprobs:
            assert top.token == top.bytes.decode("utf-8", errors="replace")


def test_chat_logprobs_on_the_wire_are_text_and_real_bytes(served, client):
    engine, _ = served
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello engine"}],
                                           max_tokens=16, temperature=0, logprobs=True, top_logprobs=2,
                                           extra_body={"ignore_eos": True})
    content = reply.choices[0].logprobs.content
    assert len(content) == 16
    specials = set(engine.tokenizer.all_special_tokens)
    shown = b"".join(bytes(e.bytes) for e in content if e.token not in specials)
    assert shown.decode("utf-8", errors="replace") == reply.choices[0].message.content, (
        "the bytes of the tokens, joined, are the answer's text")
    for entry in content:
        assert entry.token == bytes(entry.bytes).decode("utf-8", errors="replace")
        assert entry.top_logprobs[0].token == entry.token and entry.top_logprobs[0].bytes == entry.bytes  # greedy
        for top in entry.top_logprobs:
            assert top.token == bytes(top.bytes).decode("utf-8", errors="replace")
