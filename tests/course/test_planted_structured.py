"""Chapter 8's tests name the mistakes learners made (found in trials, once accepted by grading).

Each case plants one wrong answer in a copy of the reference module, points the chapter's test module
at it, and runs the test that should catch it: it must fail, with a message that names the mistake.
"""

import inspect
import re
import sys
from pathlib import Path

import pytest
from planted import import_planted

from miniyaie._switch import SOLUTIONS_ROOT

pytestmark = pytest.mark.ungraded
CH08 = Path(__file__).resolve().parents[1] / "ch08_structured_output"

PLANTS = {
    "enum judged by the rest as a schema, with no type": (
        "json_schema.py", "if satisfies(value, schema)]",
        'if re.fullmatch(schema_to_regex({k: v for k, v in schema.items() if k not in IGNORED | {"enum", "const"}}, '
        'depth, limits), json.dumps(value, separators=(",", ":"), ensure_ascii=False))]', "test_schema_values", "test_without_a_type_each_keyword_judges_only_the_enum_values_of_its_type", {},
        r"was refused \(unsupported or missing JSON schema type None\), but 1 is valid"),
    "enum kept whole when the rest names no type": (
        "json_schema.py", "if satisfies(value, schema)]", 'if "type" not in schema or satisfies(value, schema)]',
        "test_schema_values",
        "test_without_a_type_each_keyword_judges_only_the_enum_values_of_its_type", {},
        r'Task 8\.5: the regex allows "a", which is not valid under \{\'minLength\': 3\}'),
    "mask built outside a lock": (
        "token_index.py", "            with self._build_lock:\n                packed = self._masks.get(state)",
        "            if True:\n                packed = self._masks.get(state)", "test_token_index",
        "test_threads_asking_for_one_state_at_once_compute_its_mask_once", {"threads": 8},
        r"each state's mask must be computed once .* it was computed \{\d+: [2-8], \d+: [2-8]\} times"),
    "mask built under the lock nbytes needs": (
        "token_index.py", "                    with self._lock:\n                        self._masks[state] = packed",
        "                    if True:\n                        self._masks[state] = packed",
        "test_token_index", "test_a_built_state_and_nbytes_are_answered_while_another_state_builds", {},
        r"mask\(\) of a state already built and nbytes must be answered"),
    "a Python loop over tokens": (  # passed all 29 tests of Task 8.2, at 603 s against 33 s for the whole grade
        "token_index.py", "    ends = torch.full((token_bytes.shape[0],), DEAD, dtype=torch.int64)\n",
        "    table = next_state.tolist(); out = []\n"
        "    for row, n in zip(token_bytes.tolist(), lengths.tolist()):\n"
        "        cur = state if n else DEAD\n"
        "        for byte in row[:n]:\n"
        "            cur = table[cur][byte]\n"
        "            if cur == DEAD: break\n"
        "        out.append(cur)\n"
        "    return torch.tensor(out, dtype=torch.int64)\n",
        "test_token_index", "test_a_vocabulary_the_size_of_smollm2s_is_walked_without_a_python_loop_over_its_tokens",
        {"state": 1}, r"Task 8\.2: walk_vocabulary ran more than 4,915 lines of Python .*: a Python loop over tokens"),
    "a restarted id's old use given back before its new guide took one": (
        "constraints.py",
        "                guide = Guide(cache.take(pattern, self._budget(params), keyword_of(params)))\n"
        "                self.forget(rid)",
        "                self.forget(rid)\n"
        "                guide = Guide(cache.take(pattern, self._budget(params), keyword_of(params)))",
        "test_index_cache", "test_guides_and_prepared_holds_give_back_each_use_of_an_index_once", {},
        r"start\(\['r1'\]\) twice .*r1's new guide must take its use before the old one is given back"),
    "an anyOf branch at its parent's depth": (
        "json_schema.py", '        return "(" + "|".join(schema_to_regex(s, depth + 1, limits, "anyOf")',
        '        return "(" + "|".join(schema_to_regex(s, depth, limits, "anyOf")', "test_json_schema",
        "test_each_subschema_is_one_level_deeper", {"keyword": "anyOf"},
        r"Task 8\.5: 6 levels of anyOf were converted, the depth cap not reached: each subschema \(anyOf's\) is one "
        r"level deeper"),
    "an anyOf branch at its parent's depth, 300 deep": (
        "json_schema.py", '        return "(" + "|".join(schema_to_regex(s, depth + 1, limits, "anyOf")',
        '        return "(" + "|".join(schema_to_regex(s, depth, limits, "anyOf")', "test_json_schema",
        "test_a_schema_nested_hundreds_deep_is_refused_by_keyword_without_a_recursion_error", {"keyword": "anyOf"},
        r"Task 8\.5: anyOf 300 levels deep raised RecursionError: each subschema \(anyOf's\) is one level deeper"),
    "no check for keywords beside anyOf": (
        "json_schema.py", "        if others:\n            raise PatternError(f\"anyOf with other keywords",
        "        if False:\n            raise PatternError(f\"anyOf with other keywords", "test_json_schema",
        "test_a_schema_the_conversion_cannot_honour_is_refused_by_name",
        {"schema": {"anyOf": [{"type": "null"}], "type": "null"}, "named": "'type'"},
        r"Task 8\.5: the schema was converted, but .*any keyword beside it but annotations \(it belongs inside each "
        r"branch\)"),
    "forced tokens cut to the room ignored": (
        "constraints.py", "                if len(tokens) > room(rid):  # cut", "                if False:  # cut",
        "test_jump_forward", "test_after_a_step_each_request_advances_jumps_within_its_room_and_ends_or_fails_alone",
        {}, r"Task 8\.7: room\(id\) is how many more tokens a request may take: 'short' had room for 3 and got 8"),
    "a jump backed off to the last whole character": (
        "guide.py", ("        dfa, forced, state = self.index.dfa, bytearray(), self.state\n",
                     "            i += n\n        return tokens\n"),
        ("        start = self.state\n        dfa, forced, state = self.index.dfa, bytearray(), self.state\n",
         "            i += n\n"
         "        while tokens:\n"
         "            try:\n"
         "                bytes(forced[:i]).decode()\n"
         "                break\n"
         "            except UnicodeDecodeError:\n"
         "                i -= len(self.index.vocabulary.token_bytes[tokens.pop()])\n"
         "        self.state = start\n"
         "        for token in tokens:\n"
         "            self.advance(token)\n"
         "        return tokens\n"),
        "test_jump_forward", "test_jump_forward_may_stop_inside_a_character_where_the_tokens_do", {},
        r"Task 8\.7: 'é' is forced .* jump-forward writes it, half a character"),
    "braces left unescaped in a list of texts": (  # passed the whole chapter: x{2} matched xx, not itself
        "trie_regex.py", '\n            branches.append(re.escape("".join(chain)) + tail)',
        '\n            branches.append("".join("\\\\" + c if c in "\\\\.^$*+?[]|()" else c for c in chain) + tail)',
        "test_json_schema", "test_a_list_of_texts_matches_exactly_those_texts", {},
        r"Task 8\.4: 'x\{2\}' is one of the texts and must match\. The texts: \['x\{2\}', 'a\{1,3\}'\]"),
    "an enum kept whole beside a type that refuses every value": (  # failed with a bare "DID NOT RAISE"
        "json_schema.py", "if satisfies(value, schema)]", 'if "type" in schema or satisfies(value, schema)]',
        "test_json_schema", "test_a_schema_that_leaves_nothing_to_write_is_refused_by_name",
        {"schema": {"type": "string", "enum": [1, 2]}, "keyword": "enum"},
        r"Task 8\.5: the schema leaves nothing to write, yet it was converted: no value of its enum is valid"),
    "a finished request's guide moved by after_step": (  # failed with a KeyError in the engine
        "constraints.py", "            if guide is None or rid in finished:", "            if guide is None:",
        "test_jump_forward", "test_after_a_step_each_request_advances_jumps_within_its_room_and_ends_or_fails_alone",
        {}, r"Task 8\.7: a request that finished this step for another reason \('done', in `finished`\) is left alone"),
    "named characters read through other": (
        "fsm.py", "            for char in filter(writable, members):",
        "            for char in filter(writable, members if other is None else ()):", "test_byte_automaton",
        "test_the_byte_automaton_reads_exactly_the_utf8_of_what_the_character_automaton_reads", {},
        r"^Task 8\.1: the bytes [0-9a-f ]+ (die|are alive) in the byte automaton, but they"),
    "live states through classes UTF-8 cannot write": (
        "fsm.py", "    usable = {k for k, c in enumerate(chars.classes) if k == chars.other or any(map(writable, c))}",
        "    usable = set(range(len(chars.classes)))", "test_byte_automaton",
        "test_live_states_are_those_that_reach_an_accepting_state", {},
        r"^Task 8\.1: live_states must be the states that reach an accepting state"),
    "the lone surrogate quoted in the refusal": (
        "schema_values.py", 'raise PatternError(f"{keyword}: a string holds a lone surrogate',
        'raise PatternError(f"{keyword}: {value!s} holds a lone surrogate', "test_schema_values",
        "test_a_lone_surrogate_is_refused_naming_it_in_text_utf8_can_write", {},
        r"cannot be written as UTF-8: .*makes the server fail with a 500"),
    "a string's characters as any escape and anything but a quote": (  # passed the whole chapter: {"a":"\x01"}
        "json_containers.py", "\n    string = f'\"{STRING_CHAR}*\"'\n", "\n    string = r'\"([^\"\\\\]|\\\\[\"\\\\/bfnrtu])*\"'\n",
        "test_json_schema", "test_every_text_the_json_object_regex_matches_is_json", {},
        r"^Task 8\.3: json_object_regex\(\d\) must match only JSON; it matches '.*', which is not JSON"),
    "a const beside an enum, the enum ignored": (  # {"const": 1, "enum": [true]} compiled to 1
        "schema_values.py", '    if "enum" in schema and not any(', '    if "enum" in schema and "const" not in schema and not any(',
        "test_json_schema", "test_a_schema_the_conversion_cannot_honour_is_refused_by_name",
        {"schema": {"const": 1, "enum": [True]}, "named": "const"},
        r"Task 8\.5: the schema was converted, but a const beside an enum must be one of the enum's values"),
    "an object enum value judged as a closed object": (  # {"type": "object", "enum": [{"a": 1}]} refused
        "schema_values.py", '        if schema.get("additionalProperties", True) is False and any(',
        "        if any(", "test_json_schema", "test_a_schema_within_the_rules_is_not_refused",
        {"schema": {"type": "object", "enum": [{"a": 1}]}, "text": '{"a":1}'},
        r"Task 8\.5: the schema was refused \(enum: .*\), but jsonschema finds \{\"a\":1\} valid under it: .*an object "
        r"may hold unlisted properties"),
    "bounds that contradict refused whatever the type": (  # {"type": "string", "minItems": 3, "maxItems": 2}: a 400
        "json_schema.py", "            if what in kinds and schema.get(high) is not None", "            if schema.get(high) is not None",
        "test_json_schema", "test_a_schema_within_the_rules_is_not_refused",
        {"schema": {"type": "string", "minItems": 3, "maxItems": 2}, "text": '"x"'},
        r"Task 8\.5: the schema was refused \(maxItems 2 is below minItems 3.*\), but jsonschema finds \"x\" valid under "
        r"it: a keyword applies to the values of its type only"),
    "an enum's pattern matched whole": (  # JSON Schema searches: "b" allows "abc"
        "schema_values.py", 'not re.search(schema["pattern"], value)', 'not re.fullmatch(schema["pattern"], value)',
        "test_json_schema", "test_a_schema_within_the_rules_is_not_refused",
        {"schema": {"type": "string", "enum": ["abc"], "pattern": "b"}, "text": '"abc"'},
        r"Task 8\.5: the schema was refused .*a pattern is searched for"),
    "1.0 not an integer": (
        "schema_values.py", '\n                or kind == "number" and "integer" in kinds and value.is_integer()):', "):",
        "test_json_schema", "test_a_schema_within_the_rules_is_not_refused",
        {"schema": {"type": "integer", "enum": [1.0]}, "text": "1.0"},
        r"Task 8\.5: the schema was refused .*'integer' includes 1\.0"),
    "no recency refresh on a hit (first in, first out)": (
        "index_cache.py", "            if index is not None:\n                self._indexes.move_to_end(pattern)\n",
        "            if index is not None:\n", "test_index_cache", "test_a_hit_makes_its_pattern_the_most_recently_used", {},
        r"^Task 8\.6: a hit makes its pattern the most recently used: .*it evicted p3, the first compiled"),
    "a state seen before found by a search through the states": (  # quadratic: passed the whole chapter
        "char_automaton.py", ("            k = key(following)\n            if k not in number:\n",
                              "            transitions[i][symbol] = number[k]\n"),
        ("            k = following\n            if k not in states:\n", "            transitions[i][symbol] = states.index(k)\n"),
        "test_byte_automaton", "test_the_crawl_recognises_a_state_seen_before_without_searching_the_states", {},
        r"^Task 8\.1: the crawl made [\d,]+ equality tests between states to number 3,000 states"),
    "the budget checked every 16 states followed, not found": (
        "char_automaton.py", ("    while i < len(states):\n        state = states[i]\n",
                              "                if budget is not None and len(states) % 16 == 0:"),
        ("    while i < len(states):\n        if budget is not None and i % 16 == 0:\n            budget.check(len(states))\n"
         "        state = states[i]\n", "                if False:"),
        "test_byte_automaton", "test_the_crawl_checks_the_budget_every_16_states_found_even_when_one_state_finds_many",
        {}, r"^Task 8\.1: the crawl had found [\d,]+ states when the budget refused it \(max_states=\d+\): the count it "
        r"checks is the states found"),
}


@pytest.mark.parametrize("mistake", list(PLANTS))
def test_a_planted_mistake_fails_its_tasks_test_with_a_message_that_names_it(mistake, tmp_path, monkeypatch):
    file, old, new, test_module, test_name, params, message = PLANTS[mistake]
    source = (SOLUTIONS_ROOT / "structured" / file).read_text()
    for one_old, one_new in zip(*((old, new) if isinstance(old, tuple) else ((old,), (new,)))):
        assert source.count(one_old) == 1, f"the reference no longer contains {one_old!r}: update the plant"
        source = source.replace(one_old, one_new)
    if mistake == "mask built under the lock nbytes needs":  # the whole build under self._lock, not the build lock
        source = source.replace("with self._build_lock:", "with self._lock:")
    planted = tmp_path / f"planted_{file}"
    planted.write_text(source)
    module = import_planted(planted, f"planted_{Path(file).stem}_{abs(hash(mistake))}")
    for folder in (CH08, CH08.parent / "ch00_model", CH08.parent / "ch05_engine"):  # as chapter 8's conftest
        monkeypatch.syspath_prepend(str(folder))
    tests = import_planted(CH08 / f"{test_module}.py", f"planted_tests_{test_module}")
    for name in ("schema_to_regex", "check_value", "alternation", "TokenIndex", "walk_vocabulary", "Guide",
                 "spell_in_utf8", "live_states", "compile_regex", "json_object_regex",
                 "IndexCache"):  # what the test reaches, from the planted module
        if hasattr(module, name) and hasattr(tests, name):
            monkeypatch.setattr(tests, name, getattr(module, name))
    if file == "char_automaton.py":  # the test imports crawl from the module when it runs
        monkeypatch.setattr(sys.modules["miniyaie.structured.char_automaton"], "crawl", module.crawl)
    if file == "schema_values.py":  # schema_to_regex judges enum values with the module's satisfies
        monkeypatch.setattr(sys.modules["miniyaie.structured.json_schema"], "satisfies", module.satisfies)
    if file == "constraints.py":  # the test imports Constraints from the package when it runs
        monkeypatch.setattr(sys.modules["miniyaie.structured"], "Constraints", module.Constraints)
    if file == "token_index.py":  # the test's counting index derives from the planted class
        tests.SlowIndex.__bases__ = (module.TokenIndex,)  # a fresh import of the test module: nothing to restore
    test = getattr(tests, test_name)
    wanted = {k: v for k, v in params.items() if k in inspect.signature(test).parameters}
    with pytest.raises((AssertionError, ExceptionGroup, pytest.fail.Exception)) as failure:
        test(**wanted)
    errors = failure.value.exceptions if isinstance(failure.value, ExceptionGroup) else [failure.value]
    messages = [str(e) for e in errors]
    assert any(re.search(message, m, re.S) for m in messages), f"no message names the mistake ({message!r}): {messages}"
