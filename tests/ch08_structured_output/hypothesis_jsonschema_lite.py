"""Values valid under the schemas of test_json_schema.py's strategy (a small, exact generator for that subset)."""

import jsonschema
from hypothesis import strategies as st

ALPHABET = st.characters(codec="utf-8", exclude_categories=["Cs"])
ANNOTATIONS = {"title", "description", "$schema", "$id", "examples", "default", "$comment"}


def values_of(schema: dict):
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else schema["enum"]
        return st.sampled_from([v for v in values if jsonschema.Draft202012Validator(schema).is_valid(v)])
    if "anyOf" in schema:
        return st.one_of([values_of(branch) for branch in schema["anyOf"]])
    kind = schema.get("type", "object" if "properties" in schema else None)
    if isinstance(kind, list):
        return st.one_of([values_of({**schema, "type": k}) for k in kind])
    if kind == "integer":
        return st.integers(-10**6, 10**6)
    if kind == "number":
        return st.floats(-1e6, 1e6, allow_nan=False).map(lambda x: round(x, 3))
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "string":
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True)
        return st.text(ALPHABET, min_size=schema.get("minLength", 0), max_size=schema.get("maxLength", 8))
    if kind == "array":
        items = schema.get("items", {"type": ["string", "number", "boolean", "null"]})
        return st.lists(values_of(items), min_size=schema.get("minItems", 0), max_size=schema.get("maxItems", 3))
    if kind == "object":
        props, required = schema.get("properties", {}), set(schema.get("required", []))

        def build(present):
            members = st.fixed_dictionaries({k: values_of(props[k]) for k in props if k in present})
            return members.map(lambda d: {k: d[k] for k in props if k in d})  # in the schema's order

        optional = [k for k in props if k not in required]
        return st.lists(st.sampled_from(optional), unique=True).flatmap(lambda extra: build(required | set(extra))) if optional else build(required)
    raise ValueError(schema)
