"""Chapter 8: structured output — constrained decoding from a regex or a JSON schema, and jump-forward."""

from miniyaie.structured.constraints import Constraints
from miniyaie.structured.char_automaton import CharDFA
from miniyaie.structured.fsm import DEAD, UTF8_SEQUENCES, ByteDFA, PatternError, compile_regex, live_states, spell_in_utf8
from miniyaie.structured.guide import JSON_OBJECT, Guide, pattern_of
from miniyaie.structured.index_cache import IndexCache
from miniyaie.structured.json_containers import array_regex, object_regex
from miniyaie.structured.json_schema import json_object_regex, schema_to_regex
from miniyaie.structured.limits import CompileCancelled, Limits
from miniyaie.structured.token_index import TokenIndex, walk_vocabulary
from miniyaie.structured.vocabulary import Vocabulary

__all__ = [
    "Constraints", "DEAD", "UTF8_SEQUENCES", "ByteDFA", "CharDFA", "PatternError", "compile_regex", "live_states",
    "spell_in_utf8", "JSON_OBJECT", "Guide", "IndexCache",
    "pattern_of", "json_object_regex", "array_regex", "object_regex", "schema_to_regex", "TokenIndex", "walk_vocabulary",
    "Vocabulary", "CompileCancelled", "Limits",
]
