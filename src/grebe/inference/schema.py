"""Structured-output schemas: one place that turns a schema into JSON Schema for the
request and validates the model's answer against it.

A msgspec.Struct type is the preferred schema (full validation, typed result). A plain
JSON-schema dict is accepted for configs that declare schemas as data; it gets a
structural check (object type, required keys, top-level property types, enums) — enough
to catch a model that ignored the schema, without a jsonschema dependency.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

import msgspec

from grebe.errors import InferenceError


class SchemaValidationError(InferenceError):
    """The model's answer did not match the schema; the message is fit to send back
    to the model as a repair hint."""


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def is_struct_type(schema: object) -> TypeGuard[type[msgspec.Struct]]:
    return isinstance(schema, type) and issubclass(schema, msgspec.Struct)


def schema_name(schema: type[msgspec.Struct] | Mapping[str, Any]) -> str:
    if is_struct_type(schema):
        return schema.__name__  # type: ignore[union-attr]
    return str(schema.get("title", "answer"))  # type: ignore[union-attr]


def to_json_schema(schema: type[msgspec.Struct] | Mapping[str, Any]) -> dict[str, Any]:
    """The JSON Schema to send in `response_format`, with $defs inlined at the root."""
    if is_struct_type(schema):
        generated = msgspec.json.schema(schema)  # type: ignore[arg-type]
        # msgspec puts the struct itself in $defs behind a root $ref; OpenAI-style
        # response_format wants an object at the root.
        ref = generated.get("$ref", "")
        defs = dict(generated.get("$defs", {}))
        if ref.startswith("#/$defs/"):
            root = dict(defs.get(ref.removeprefix("#/$defs/"), {}))
            if defs:
                root["$defs"] = defs
            return root
        return generated
    if not isinstance(schema, Mapping):
        raise TypeError(f"schema must be a msgspec.Struct type or a dict, not {type(schema)}")
    return dict(schema)


def validate_json(raw: str | bytes, schema: type[msgspec.Struct] | Mapping[str, Any]) -> Any:
    """Decode `raw` and validate it; raise SchemaValidationError saying what is wrong."""
    if is_struct_type(schema):
        try:
            return msgspec.json.decode(raw, type=schema)  # type: ignore[arg-type]
        except msgspec.ValidationError as exc:
            raise SchemaValidationError(f"answer does not match the schema: {exc}") from exc
        except msgspec.DecodeError as exc:
            raise SchemaValidationError(f"answer is not valid JSON: {exc}") from exc
    if not isinstance(schema, Mapping):
        raise TypeError(f"schema must be a msgspec.Struct type or a dict, not {type(schema)}")
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise SchemaValidationError(f"answer is not valid JSON: {exc}") from exc
    _check(value, schema, "$")
    return value


def _check(value: Any, schema: Mapping[str, Any], where: str) -> None:
    expected = schema.get("type")
    if isinstance(expected, str) and expected in _JSON_TYPES:
        ok = isinstance(value, _JSON_TYPES[expected])
        if expected in ("integer", "number") and isinstance(value, bool):
            ok = False
        if not ok:
            raise SchemaValidationError(f"{where}: expected {expected}, got {type(value).__name__}")
    if "enum" in schema and value not in schema["enum"]:
        raise SchemaValidationError(f"{where}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, dict):
        missing = [k for k in schema.get("required", ()) if k not in value]
        if missing:
            raise SchemaValidationError(f"{where}: missing required keys {missing}")
        for key, sub in schema.get("properties", {}).items():
            if key in value and isinstance(sub, Mapping):
                _check(value[key], sub, f"{where}.{key}")


def repair_messages(
    messages: list[dict[str, str]], answer: str, error: Exception
) -> list[dict[str, str]]:
    """The conversation for the one repair attempt: the bad answer and what was wrong."""
    return [
        *messages,
        {"role": "assistant", "content": answer},
        {
            "role": "user",
            "content": f"That answer was rejected: {error}. "
            "Reply again with only a JSON value that matches the schema.",
        },
    ]
