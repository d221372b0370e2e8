"""Walk a result's JSON (``to_dict()``) and find the attribute behind every key: the rule
the results state ("every key of to_dict() is the attribute of the same name")."""

from __future__ import annotations

from typing import Any, Iterator


def json_leaves(tree: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """Every leaf of a JSON tree with its path (dict keys and list indices)."""
    if isinstance(tree, dict) and tree:
        for key, value in tree.items():
            yield from json_leaves(value, (*path, key))
    elif isinstance(tree, list) and tree:
        for i, value in enumerate(tree):
            yield from json_leaves(value, (*path, i))
    else:
        yield path, tree


def attribute_at(obj: Any, path: tuple) -> Any:
    """Follow ``path`` on the Python object: a dict by key, a sequence by index, anything
    else by attribute (AttributeError when the attribute of a key's name is missing)."""
    for key in path:
        if isinstance(obj, dict):
            obj = obj[key]
        elif isinstance(key, int):
            obj = obj[key]
        else:
            obj = getattr(obj, key)
    return obj
