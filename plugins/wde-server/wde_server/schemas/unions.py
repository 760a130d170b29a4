"""Unions in request schemas, and which of a union's validation errors to report.

Pydantic tags the error of each union member with the member's name (``input.str``,
``input.list[str].1``). Request unions tag their members with words (``a list of strings``); the reported
error is that of the member that got furthest into the value (``input[1]`` of ``["a", 5]``), and when
every member failed on the value's own type, the message lists what each member expected.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Union

from pydantic import Tag

# pydantic's own member tags that look like field names
TYPE_NAMES = frozenset({"str", "int", "bool", "float", "bytes", "none", "dict", "list"})
TYPE_WORDS = {"string_type": "a string", "int_type": "an integer", "bool_type": "a boolean", "list_type": "a list",
              "dict_type": "an object", "model_type": "an object", "model_attributes_type": "an object"}


def one_of(*members: tuple[Any, str]) -> Any:
    """``Union`` of ``(type, words)`` members; an error in a member is tagged with its words."""
    return Union[tuple(Annotated[kind, Tag(words)] for kind, words in members)]


def is_tag(part: Any) -> bool:
    """Whether a part of an error location is a union member's tag, not a field name or an index."""
    if not isinstance(part, str):
        return False
    return not part.isidentifier() or part[0].isupper() or part in TYPE_NAMES


def tags(error: dict) -> list[int]:
    """Where union tags are in ``error``'s location (an unknown key the client sent is never one)."""
    loc = error["loc"]
    end = len(loc) - 1 if error.get("type") == "extra_forbidden" else len(loc)
    return [i for i in range(end) if is_tag(loc[i])]


def tag_at(error: dict, start: int) -> int | None:
    """Where the first union tag at or after ``start`` is in ``error``'s location (``None``: no tag)."""
    return next((i for i in tags(error) if i >= start), None)


def place(error: dict) -> list[Any]:
    """``error``'s location without union tags."""
    drop = set(tags(error))
    return [part for i, part in enumerate(error["loc"]) if i not in drop]


def mismatch(error: dict) -> bool:
    """Whether the value at the error's place is of the wrong JSON type (not a wrong value of the right type)."""
    return str(error.get("type", "")).endswith("_type")


def reach(error: dict) -> tuple:
    """How far a union member got into the value: deeper, then later items, then past the type check."""
    where = place(error)
    return len(where), [p for p in where if isinstance(p, int)], not mismatch(error)


def pick_error(errors: list[dict], start: int = 0) -> dict:
    """The error to report: the first one, or when it lies in a union, the one of the member that reached
    furthest (its message listing what every member expected when all failed on the value's type)."""
    first = errors[0]
    at = tag_at(first, start)
    if at is None:
        return first
    prefix = first["loc"][:at]
    members: dict[str, list[dict]] = {}
    for error in errors:
        if error["loc"][:at] == prefix and tag_at(error, at) == at:
            members.setdefault(error["loc"][at], []).append(error)
    return best_member({tag: pick_error(group, at + 1) for tag, group in members.items()}, at)


def best_member(chosen: dict[str, dict], at: int) -> dict:
    """The furthest-reaching member's error; a tie of type mismatches becomes one error listing them."""
    best = max(chosen.values(), key=reach)
    rivals = [tag for tag, error in chosen.items() if mismatch(error) and place(error) == place(best)]
    if not mismatch(best) or len(rivals) < 2:
        return best
    if len(place(best)) == len([p for p in best["loc"][:at] if not is_tag(p)]):
        expected = [str(tag) for tag in rivals]  # every member failed on the union's own value: their words
    else:
        expected = list(dict.fromkeys(word for tag in rivals for word in expects(chosen[tag])))
    return {**best, "expected": expected, "msg": f"expected {words(expected)}; got {given(best.get('input'))}"}


def expects(error: dict) -> list[str]:
    """What a type mismatch expected, in words (``int_type`` -> ``an integer``)."""
    if "expected" in error:
        return error["expected"]
    return [TYPE_WORDS.get(error.get("type"), str(error.get("msg", "")).removeprefix("Input should be "))]


def words(items: list[str]) -> str:
    """``["a", "b", "c"]`` -> ``a, b or c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def given(value: Any) -> str:
    """What the client sent, in words: a short number, a boolean or null as written in JSON, else its type."""
    if value is None or isinstance(value, (bool, int, float)):
        written = json.dumps(value)
        return written if len(written) <= 24 else "a number"
    return {str: "a string", list: "a list", dict: "an object"}.get(type(value), type(value).__name__)
