"""Task 8.7: jump-forward appends what the pattern forces, in the longest tokens, and the engine skips those steps.

With a vocabulary of single bytes the model has exactly one choice at every
forced byte, so greedy output with and without jump-forward must be equal
token for token, in fewer model steps, with every KV block returned.
"""

import pytest
from byte_vocabularies import byte_vocabulary
from tiny_models import save_tiny_model

from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.engine import SamplingParams
from miniyaie.structured import Guide, PatternError, TokenIndex, compile_regex, schema_to_regex

PIECES = [b'{"', b"name", b'":', b'name":"', b'"}', b"ab"]


def guide(pattern: str, pieces=PIECES) -> Guide:
    return Guide(TokenIndex(compile_regex(pattern), byte_vocabulary(pieces)))


def text_of(g: Guide, tokens) -> bytes:
    return b"".join(g.index.vocabulary.token_bytes[t] for t in tokens)


def walked(g: Guide, data: bytes) -> int:
    """The state `data` leads to from the initial state, read byte by byte through the DFA."""
    state = g.index.dfa.initial
    for byte in data:
        state = int(g.index.dfa.next_state[state, byte])
    return state


@pytest.mark.task("8.7")
def test_forced_text_comes_out_in_the_longest_tokens_and_moves_the_guide():
    g = guide(r'\{"name":"[a-z]+"\}')
    tokens = g.forced_tokens()
    assert text_of(g, tokens) == b'{"name":"', f"the pattern forces '{{\"name\":\"' first, got {text_of(g, tokens)!r}"
    assert tokens == [256, 259], (
        f"longest first: '{{\"' (256), then 'name\":\"' (259) rather than 'name' + '\":' + '\"', got {tokens}")
    assert g.state == walked(g, b'{"name":"'), f"the guide stands after '{{\"name\":\"', got state {g.state}"
    allowed = g.allowed().nonzero().flatten().tolist()
    assert allowed == list(range(ord("a"), ord("z") + 1)) + [257, 261], f"after the forced text the guide expects letters (a-z, 'name', 'ab'), got {allowed}"


@pytest.mark.task("8.7")
def test_nothing_is_forced_where_there_is_a_choice_or_the_pattern_may_end():
    g = guide("(ab|cd)e?")
    assert g.forced_tokens() == [] and g.state == g.index.dfa.initial, "two ways to go on: nothing forced, the guide unmoved"
    g.advance(ord("a"))
    g.advance(ord("b"))
    before = g.state
    assert g.forced_tokens() == [] and g.state == before, "after 'ab' the pattern may end or add 'e': nothing is forced"


@pytest.mark.task("8.7")
def test_a_forced_character_of_several_bytes_is_forced_whole():
    g = guide("é!", pieces=[])
    tokens = g.forced_tokens()
    assert tokens == [0xC3, 0xA9, ord("!")], f"'é!' is three forced bytes, each its own token here, got {tokens}"
    assert g.finished, "after the forced 'é!' the pattern is complete"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from miniyaie.model import load_model

    path = tmp_path_factory.mktemp("tiny-qwen2-structured")
    save_tiny_model("qwen2", path)  # vocabulary 320: ids 0..255 are the bytes here, 256 is end-of-sequence
    return load_model(path)


SCHEMA = {"type": "object", "required": ["name", "age", "ok"], "properties": {
    "name": {"type": "string", "maxLength": 6}, "age": {"type": "integer"}, "ok": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string", "enum": ["red", "blue"]}, "maxItems": 2}}}


def run(model, jump_forward: bool):
    engine = LLMEngine(model, EngineConfig(block_size=4, num_blocks=200, max_num_batched_tokens=32),
                       vocabulary=byte_vocabulary([], size=320))
    params = SamplingParams(max_tokens=60, json_schema=SCHEMA, jump_forward=jump_forward)
    prompts = [[1, 2, 3], [7, 8, 9, 10], [42] * 5]
    outputs = engine.generate(prompts, params, eos_token_ids=[256])
    return [o.token_ids for o in outputs], engine


@pytest.mark.task("8.7")
def test_the_engine_writes_the_same_tokens_in_fewer_steps(tiny_model):
    import json
    import re

    plain, plain_engine = run(tiny_model, jump_forward=False)
    jumped, engine = run(tiny_model, jump_forward=True)
    assert jumped == plain, "with single-byte tokens, jump-forward must not change a greedy output"
    assert any(len(tokens) < 60 for tokens in jumped), "no output completed its object: the test lost its teeth"
    for tokens in jumped:
        text = bytes(t for t in tokens if t < 256).decode()
        if len(tokens) < 60:
            assert re.fullmatch(schema_to_regex(SCHEMA), text) and json.loads(text), f"not valid: {text!r}"
    forced = engine.counters["forced_tokens"]
    assert forced > 0, "the schema's keys and separators are forced: jump-forward should have appended them"
    assert engine.counters["steps"] < plain_engine.counters["steps"], (
        f"jump-forward took {engine.counters['steps']} steps, without it {plain_engine.counters['steps']}")
    assert engine.num_request_blocks == 0 and plain_engine.num_request_blocks == 0, "every block comes back"


@pytest.mark.task("8.7")
def test_jump_forward_may_stop_inside_a_character_where_the_tokens_do():
    """Forced text is bytes: 'é' (C3 A9) then a choice, with a token for C3 alone and A9 only inside 'A9 x' and
    'A9 y': jump-forward writes C3 and the guide stands between the character's two bytes, a state like any other."""
    from miniyaie.structured import Vocabulary

    vocabulary = Vocabulary([b"\xc3", b"\xa9x", b"\xa9y", None], (3,))
    g = Guide(TokenIndex(compile_regex("é[xy]"), vocabulary))
    tokens = g.forced_tokens()
    assert tokens == [0], (
        f"Task 8.7: 'é' is forced and the vocabulary writes its first byte C3 alone: jump-forward writes it, half a "
        f"character, and leaves the model the choice of the tokens that finish it; got {tokens} ({text_of(g, tokens)!r})")
    assert g.state == walked(g, b"\xc3"), f"the guide stands after C3, inside the character: got state {g.state}"
    assert g.allowed().nonzero().flatten().tolist() == [1, 2], "then the model chooses between 'A9 x' and 'A9 y'"


@pytest.mark.task("8.7")
def test_forced_text_the_vocabulary_cannot_write_is_left_to_the_model():
    from miniyaie.structured import Vocabulary

    vocabulary = Vocabulary([b"ab", b"c", b"x", b"y", None], (4,))  # no token for "d"
    g = Guide(TokenIndex(compile_regex("abcdab[xy]"), vocabulary))  # forced: "abcdab", then a choice
    tokens = g.forced_tokens()
    assert tokens == [0, 1], (
        f"'ab' and 'c' can be written, 'd' has no token: jump-forward stops before it (and writes nothing "
        f"after it, even 'ab', which has a token), got {tokens} ({text_of(g, tokens)!r})")
    assert g.state == walked(g, b"abc"), (
        f"the guide stands after the bytes of the tokens it returned ('abc', state {walked(g, b'abc')}), not after "
        f"the whole forced text ('abcdab', state {walked(g, b'abcdab')}): got state {g.state}")
    assert g.forced_tokens() == [] and g.state == walked(g, b"abc"), "asked again, it forces nothing more and stays"


@pytest.mark.task("8.7")
def test_after_a_step_each_request_advances_jumps_within_its_room_and_ends_or_fails_alone():
    from miniyaie.structured import Constraints

    c = Constraints(byte_vocabulary([]), 300)  # single-byte tokens: a forced byte is one token
    patterns = {"jump": r'\{"name":"[a-z]+"\}', "plain": r'\{"name":"[a-z]+"\}', "short": r'\{"name":"[a-z]+"\}',
                "ends": "xyz", "bad": "xyz", "done": "xyz", "whole": "x", "last": "xy"}
    for rid, pattern in patterns.items():
        c.start([rid], SamplingParams(regex=pattern))
    sampled = {"jump": ord("{"), "plain": ord("{"), "short": ord("{"), "ends": ord("x"), "bad": ord("q"),
               "done": ord("x"), "whole": ord("x"), "last": ord("x")}
    rooms = {"jump": 50, "plain": 50, "short": 3, "ends": 50, "bad": 50, "done": 50, "whole": 0, "last": 1}
    asks = {rid: rid != "plain" for rid in patterns}
    done_state = c.guides["done"].state
    forced, ended, failed = c.after_step(sampled, {"done": "length"}, asks.__getitem__, rooms.__getitem__)
    as_text = {rid: bytes(tokens).decode() for rid, tokens in forced.items()}
    answered = {what: mapping["done"] for what, mapping in (("forced", forced), ("ended", ended), ("failed", failed))
                if "done" in mapping}
    assert not answered and c.guides["done"].state == done_state, (
        "Task 8.7: a request that finished this step for another reason ('done', in `finished`) is left alone: its "
        f"guide unmoved, nothing forced, no end or failure of its own; got {answered or 'its guide moved'}")
    assert len(forced.get("short", [])) == 3 and len(forced.get("last", [])) == 1, (
        f"Task 8.7: room(id) is how many more tokens a request may take: 'short' had room for 3 and got "
        f"{len(forced.get('short', []))} forced tokens, 'last' room for 1 and got {len(forced.get('last', []))}: "
        "the forced tokens are cut to the room left")
    assert as_text == {"jump": '"name":"', "short": '"na', "ends": "yz", "last": "y"}, (
        "forced text: '\"name\":\"' after '{' for a request that asked, nothing for one that did not ('plain'), "
        "cut to the room left ('short': 3), 'yz' after 'x' of 'xyz', 'y' of 'xy' in its last room, nothing for a "
        f"request already finished ('done') or complete ('whole'); got {as_text}")
    assert ended.get("short") == "length", (
        f"Task 8.7: 'short' used its last room (3 tokens) on forced tokens without completing its pattern: it ends "
        f"'length', got {ended.get('short')!r}")
    assert ended == {"short": "length", "ends": "stop", "whole": "stop", "last": "stop"}, (
        "'short' used its room on forced tokens (length); 'ends' and 'last' are complete after their forced tokens, "
        f"'whole' after its sampled token (stop, even with no room left: the text is whole); got {ended}")
    assert set(failed) == {"bad"} and isinstance(failed["bad"], PatternError), (
        f"'q' does not continue 'xyz': that request alone fails with the guide's PatternError, got {failed}")
    assert c.forced_tokens == 2 + 3 + 8 + 1, f"forced_tokens counts the tokens appended: 14, got {c.forced_tokens}"


@pytest.mark.task("8.7")
@pytest.mark.parametrize("room", [1, 2])
def test_forced_text_cut_to_the_room_leaves_the_guide_after_the_kept_tokens(room):
    """'xyz' after sampling 'x' forces 'yz'; with room for one token only 'y' is written, and 'xy' is not 'xyz'."""
    from miniyaie.structured import Constraints

    c = Constraints(byte_vocabulary([]), 300)
    c.start(["cut"], SamplingParams(regex="xyz"))
    forced, ended, failed = c.after_step({"cut": ord("x")}, {}, lambda rid: True, lambda rid: room)
    kept = b"yz"[:room]
    assert not failed and bytes(forced.get("cut", [])) == kept, f"forced text cut to {room} token(s): {kept!r}"
    g = c.guides["cut"]
    assert g.state == walked(g, b"x" + kept), (
        f"the guide stands after the tokens kept ({(b'x' + kept)!r}), not after every forced token the pattern "
        f"had: only what is written moves it")
    want = "stop" if room == 2 else "length"
    assert ended == {"cut": want}, (
        f"'x' + {kept!r} {'is' if room == 2 else 'is not'} the whole pattern 'xyz': the request ends {want!r}; got {ended} "
        "(a request cut short by its room did not complete its pattern)")


@pytest.mark.task("8.7")
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_pattern_the_vocabulary_cannot_finish_fails_its_request_alone(tiny_model, temperature):
    """"abc" with no token for "c": after "ab" nothing is allowed; that request fails, its neighbour finishes."""
    from miniyaie.structured import Vocabulary

    vocabulary = Vocabulary([b"a", b"b", b"x"] + [None] * 317, (256,))
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4, num_blocks=50, max_num_batched_tokens=32), vocabulary=vocabulary)
    stuck = engine.add_request([1, 2, 3], SamplingParams(max_tokens=10, regex="abc", temperature=temperature), [256])
    other = engine.add_request([4, 5], SamplingParams(max_tokens=5, temperature=temperature, ignore_eos=True), [256])
    events = []
    while engine.has_unfinished():
        events += engine.step()
    errors = [e.error for e in events if e.error is not None]
    assert [e.request_id for e in events if e.error is not None] == [stuck] and "cannot be completed" in str(errors[0]), errors
    assert [e.finish_reason for e in events if e.request_id == other][-1] == "length"
    assert engine.num_request_blocks == 0, "the failed request's blocks come back"


@pytest.mark.task("8.7")
@pytest.mark.parametrize("jump_forward", [False, True])
def test_a_pattern_that_must_end_before_min_tokens_fails_saying_so(tiny_model, jump_forward):
    """regex "abc?" with no token for "c" and min_tokens=5: after "ab" the end is the only token allowed (the
    pattern could go on, the vocabulary cannot) and min_tokens bans it; the error names both."""
    from miniyaie.structured import Vocabulary

    vocabulary = Vocabulary([None if i == ord("c") else bytes([i]) for i in range(256)] + [None] * 64, (256,))
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4, num_blocks=50, max_num_batched_tokens=32), vocabulary=vocabulary)
    stuck = engine.add_request([1, 2, 3], SamplingParams(max_tokens=10, min_tokens=5, regex="abc?", jump_forward=jump_forward), [256])
    other = engine.add_request([4, 5], SamplingParams(max_tokens=5, ignore_eos=True), [256])
    events = []
    while engine.has_unfinished():
        events += engine.step()
    errors = [e.error for e in events if e.error is not None]
    assert [e.request_id for e in events if e.error is not None] == [stuck], errors
    assert "min_tokens=5" in str(errors[0]) and "pattern is complete" in str(errors[0]), errors
    assert [e.finish_reason for e in events if e.request_id == other][-1] == "length"
    assert engine.num_request_blocks == 0, "the failed request's blocks come back"
