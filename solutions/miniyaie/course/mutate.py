"""Planted bugs: small wrong versions of a solution region, the way a first attempt goes wrong.

Each mutant changes one thing inside one region: a comparison flipped or
its boundary moved, a number off by one, min for max, + for -, `and` for
`or`, a condition negated, an append at the wrong end, a statement left out.
Mutants that do not compile are dropped; the rest are real candidate bugs
that the chapter's tests should catch.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass

from miniyaie.course.regions import Region

# token -> what a first attempt might write instead
SWAPS: dict[str, tuple[str, ...]] = {
    "<": ("<=",),
    "<=": ("<",),
    ">": (">=",),
    ">=": (">",),
    "==": ("!=",),
    "!=": ("==",),
    "+": ("-",),
    "-": ("+",),
    "+=": ("-=",),
    "-=": ("+=",),
    "*": ("/",),
    "min": ("max",),
    "max": ("min",),
    "and": ("or",),
    "or": ("and",),
    "True": ("False",),
    "False": ("True",),
    "break": ("continue",),
    "continue": ("break",),
    "append": ("appendleft",),
    "appendleft": ("append",),
    "popleft": ("pop",),
    "is": ("is not",),
}
COMPOUND = {"if", "elif", "else", "for", "while", "try", "except", "finally", "with", "def", "class"}


@dataclass(frozen=True)
class Mutant:
    region: Region
    line: int  # 1-based line in the file of the first changed line
    context: str  # the line above the change, stripped (tells apart two identical lines)
    original: str  # the changed source line(s), stripped
    mutated: str  # what replaced them, stripped
    text: str  # the whole mutated file

    @property
    def key(self) -> tuple[str, str, str, str]:
        """How the list of equivalent mutants names this one (no line numbers: they move)."""
        return (self.region.path, self.context, self.original, self.mutated)


def mutants_of(region: Region, text: str) -> list[Mutant]:
    """Every compiling single-change mutant of `region` in the file `text`, in source order."""
    lines = text.splitlines(keepends=True)
    body = "".join(lines[region.begin : region.end - 1])  # between the markers
    found: dict[str, Mutant] = {}
    for first, last, replacement in _edits(body):
        start, end = region.begin + first, region.begin + last  # 0-based file lines [start, end]
        new_lines = lines[:start] + replacement + lines[end + 1 :]
        new_text = "".join(new_lines)
        if new_text == text or new_text in found or not _compiles(new_text):
            continue
        original = " ".join(line.strip() for line in lines[start : end + 1])
        mutated = " ".join(line.strip() for line in replacement)
        found[new_text] = Mutant(region, start + 1, lines[start - 1].strip(), original, mutated, new_text)
    return list(found.values())


def _compiles(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


def _edits(body: str):
    """(first line, last line, replacement lines) for every candidate change; lines 0-based in body."""
    body_lines = body.splitlines(keepends=True)
    tokens = list(tokenize.generate_tokens(io.StringIO(body).readline))
    for tok in tokens:
        if tok.type in (tokenize.OP, tokenize.NAME) and tok.string in SWAPS:
            for new in SWAPS[tok.string]:
                yield _replace_token(body_lines, tok, new)
        elif tok.type == tokenize.NUMBER and tok.string.isdigit():
            n = int(tok.string)
            for new in (n + 1, n - 1):
                yield _replace_token(body_lines, tok, str(new))
    yield from _statement_edits(body_lines, tokens)


def _replace_token(body_lines: list[str], tok: tokenize.TokenInfo, new: str):
    row, col = tok.start
    line = body_lines[row - 1]
    end_col = tok.end[1] if tok.end[0] == row else len(line)
    return row - 1, row - 1, [line[:col] + new + line[end_col:]]


def _statement_edits(body_lines: list[str], tokens: list[tokenize.TokenInfo]):
    """Leave a simple statement out (replaced by `pass`); negate an if/elif/while condition."""
    statement: list[tokenize.TokenInfo] = []
    for tok in tokens:
        if tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            if statement:
                yield from _one_statement(body_lines, statement)
            statement = []
        elif tok.type not in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            statement.append(tok)


def _one_statement(body_lines: list[str], statement: list[tokenize.TokenInfo]):
    head = statement[0]
    first, last = head.start[0] - 1, statement[-1].end[0] - 1
    indent = body_lines[first][: head.start[1]]
    if head.string not in COMPOUND:
        yield first, last, [f"{indent}pass\n"]
    elif head.string in ("if", "elif", "while") and first == last and statement[-1].string == ":":
        line = body_lines[first]
        colon = statement[-1].start[1]
        condition = line[head.end[1] : colon].strip()
        yield first, first, [f"{indent}{head.string} not ({condition}):{line[colon + 1 :]}"]
