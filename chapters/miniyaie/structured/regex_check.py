"""A client's regex, checked before it is compiled: parsed on its own, every size held against the limits.

Python's own regex parser reads the pattern as one complete regex (so a
schema's `"x)|(.*"` is a syntax error, not a way out of its string), and
its tree says what the pattern can do: repetition counts, class sizes,
lookarounds and backreferences (which an automaton cannot honour: refused).

For a JSON schema's `pattern` the tree is also printed back as a new regex
whose every match can sit between the quotes of a JSON string unescaped: a
literal quote, backslash or control character is refused, and `.`, negated
classes and `[...]` never produce them. What it matches is a subset of what
the pattern matches (`\\d` is the ASCII digits, `\\s` the space), so every
output still satisfies the pattern.
"""

from __future__ import annotations

import re
import re._constants as sre
import re._parser as sre_parse

from miniyaie.structured.limits import Limits, PatternError, over

_ANCHORS_START = {sre.AT_BEGINNING, sre.AT_BEGINNING_STRING}
_ANCHORS_END = {sre.AT_END, sre.AT_END_STRING}
_POSITIVE_CATEGORIES = {sre.CATEGORY_DIGIT: "0-9", sre.CATEGORY_WORD: "0-9A-Za-z_", sre.CATEGORY_SPACE: " "}
_NOT_IN_JSON_STRING = '"\\\\\\x00-\\x1f'  # inside [...]: the quote, the backslash and the control characters
_SURROGATES = (0xD800, 0xDFFF)


def check_regex(pattern: str, limits: Limits, keyword: str = "guided_regex") -> None:
    """Refuse (PatternError naming `keyword`) a regex that is invalid, unsupported or over the limits."""
    _walk(_parse(pattern, limits, keyword), limits, keyword, top=True)


def json_string_regex(pattern: str, limits: Limits, keyword: str = "pattern") -> str:
    """The regex of the strings `pattern` fully matches that a JSON string holds unescaped (checked as above)."""
    return _walk(_parse(pattern, limits, keyword), limits, keyword, top=True, printing=True)


def _parse(pattern, limits: Limits, keyword: str):
    if not isinstance(pattern, str):
        raise PatternError(f"{keyword} must be a string, got {type(pattern).__name__}")
    if len(pattern) > limits.max_regex_length:
        raise over(f"{keyword}: the regex's length", len(pattern), limits.max_regex_length, "max_regex_length")
    if any(_SURROGATES[0] <= ord(c) <= _SURROGATES[1] for c in pattern):
        raise PatternError(f"{keyword} holds a lone surrogate (not a character UTF-8 can write)")
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise PatternError(f"invalid regex in {keyword} {pattern[:80]!r}: {exc}") from None
    if parsed.state.flags & ~(sre.SRE_FLAG_UNICODE):
        raise PatternError(f"{keyword}: inline flags such as (?i) are not supported")
    size = _expanded_size(parsed, limits, keyword)
    if size > limits.max_states:
        raise over(f"{keyword}: the repetitions expand to about", f"{size} states, which", limits.max_states, "max_states")
    return parsed


def _expanded_size(items, limits: Limits, keyword: str) -> int:
    """About how many automaton states the regex spells out (repetitions multiply), checked as it goes."""
    total = 0
    for op, arg in items:
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            low, high, body = arg
            for count in (low, high):
                if count is not sre.MAXREPEAT and count > limits.max_repeat:
                    raise over(f"{keyword}: the repetition count", count, limits.max_repeat, "max_repeat")
            total += _expanded_size(body, limits, keyword) * max(1, low if high is sre.MAXREPEAT else high)
        elif op == sre.BRANCH:
            total += sum(_expanded_size(branch, limits, keyword) for branch in arg[1])
        elif op in (sre.SUBPATTERN, sre.ATOMIC_GROUP):
            total += _expanded_size(arg[-1], limits, keyword)
        else:
            total += 1
        if total > limits.max_states:
            return total
    return total


def _walk(items, limits: Limits, keyword: str, top: bool = False, printing: bool = False) -> str:
    """Check a parsed sequence; when printing, return it as a JSON-string-safe regex for interegular."""
    out = []
    for i, (op, arg) in enumerate(items):
        if op == sre.AT and top and (i == 0 and arg in _ANCHORS_START or i == len(items) - 1 and arg in _ANCHORS_END):
            continue  # the whole output must match anyway
        if op in (sre.ASSERT, sre.ASSERT_NOT):
            raise PatternError(f"{keyword}: lookaheads and lookbehinds are not supported")
        if op in (sre.GROUPREF, sre.GROUPREF_EXISTS):
            raise PatternError(f"{keyword}: backreferences are not supported")
        if op in (sre.AT, sre.ATOMIC_GROUP, sre.POSSESSIVE_REPEAT):
            raise PatternError(f"{keyword}: {'anchors inside the pattern' if op == sre.AT else str(op).lower()} "
                               "are not supported")
        if op == sre.LITERAL:
            out.append(_literal(arg, keyword, printing))
        elif op == sre.NOT_LITERAL:
            out.append(f"[^{_char(arg)}{_NOT_IN_JSON_STRING}]" if printing else "")
        elif op == sre.ANY:
            out.append(f"[^{_NOT_IN_JSON_STRING}]")
        elif op == sre.IN:
            out.append(_class(arg, limits, keyword, printing))
        elif op == sre.BRANCH:
            out.append("(" + "|".join(_walk(b, limits, keyword, printing=printing) for b in arg[1]) + ")")
        elif op == sre.SUBPATTERN:
            if arg[1] or arg[2]:
                raise PatternError(f"{keyword}: inline flags such as (?i) are not supported")
            out.append("(" + _walk(arg[3], limits, keyword, printing=printing) + ")")
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            low, high, body = arg
            out.append(f"({_walk(body, limits, keyword, printing=printing)}){{{low},{'' if high is sre.MAXREPEAT else high}}}")
        elif op == sre.CATEGORY:
            out.append(_class([(op, arg)], limits, keyword, printing))
        else:
            raise PatternError(f"{keyword}: the regex construct {str(op).lower()} is not supported")
    return "".join(out)


def _char(code: int) -> str:
    """One character as interegular reads it: letters, digits and non-ASCII as themselves, the rest as \\xNN."""
    char = chr(code)
    return char if char.isalnum() or code >= 128 else f"\\x{code:02x}"


def _literal(code: int, keyword: str, printing: bool) -> str:
    if _SURROGATES[0] <= code <= _SURROGATES[1]:
        raise PatternError(f"{keyword} names a lone surrogate (not a character UTF-8 can write)")
    if printing and (code < 0x20 or chr(code) in '"\\'):
        raise PatternError(f"{keyword} may not match a quote, a backslash or a control character "
                           f"({chr(code)!r}): the output is the JSON string's text as written, unescaped")
    return _char(code)


def _class(items, limits: Limits, keyword: str, printing: bool) -> str:
    """A [...] class: its size checked; printed without the characters a JSON string must escape."""
    negated = bool(items) and items[0][0] == sre.NEGATE
    members, named = [], 0
    for op, arg in items[negated:]:
        if op == sre.LITERAL:
            low = high = arg
        elif op == sre.RANGE:
            low, high = arg
        elif op == sre.CATEGORY and arg in _POSITIVE_CATEGORIES and not negated:
            members.append(_POSITIVE_CATEGORIES[arg])
            continue
        elif op == sre.CATEGORY and not printing:  # interegular spells it; no characters listed one by one
            continue
        else:
            raise PatternError(f"{keyword}: \\D, \\W, \\S and classes inside a negated class are not supported")
        named += high - low + 1
        members += _ranges(low, high, skip_json=printing and not negated)
    if named > limits.max_class_chars:
        raise over(f"{keyword}: a [...] class with characters", named, limits.max_class_chars, "max_class_chars")
    if not printing:
        return ""
    if negated:
        return "[^" + "".join(members) + _NOT_IN_JSON_STRING + "]"
    if not members:
        raise PatternError(f"{keyword}: a [...] class names only characters a JSON string must escape")
    return "[" + "".join(members) + "]"


def _ranges(low: int, high: int, skip_json: bool) -> list[str]:
    """low..high as class members, without surrogates (and, if skip_json, without '"', '\\' and controls)."""
    cut = [_SURROGATES] + ([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)] if skip_json else [])
    pieces = [(low, high)]
    for a, b in cut:
        pieces = [p for lo, hi in pieces for p in ((lo, min(hi, a - 1)), (max(lo, b + 1), hi)) if p[0] <= p[1]]
    return [_char(lo) if lo == hi else f"{_char(lo)}-{_char(hi)}" for lo, hi in pieces]
