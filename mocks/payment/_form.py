"""Stripe's request encoding: form bodies (and query strings) with nested keys.

Stripe's v1 API takes ``application/x-www-form-urlencoded`` bodies whose keys nest with
brackets, Rack style: ``metadata[order_id]=7``, ``expand[]=customer`` (raw clients) or
``expand[0]=customer`` (the official libraries index arrays), ``card[number]=4242...``,
``automatic_payment_methods[enabled]=true``. Every value is a string; the endpoint decides
what it means (``Invalid integer: abc``), like Stripe.

:func:`decode` turns the pairs into a tree of dicts, lists and strings; :class:`Params`
reads it with Stripe's validation messages and refuses parameters the endpoint does not
know (``Received unknown parameter: foo``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl

from ._errors import invalid

Node = Any  # str | dict[str, Node] | list[Node]

_SEGMENT = re.compile(r"\[([^\[\]]*)\]")
MAX_FIELDS = 1000


def decode(raw: bytes | str) -> dict[str, Node]:
    """The nested tree of a form body or query string.

    Raises:
        StripeError: malformed nesting (a key used both as a value and as a hash).
    """
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    try:
        pairs = parse_qsl(text, keep_blank_values=True, max_num_fields=MAX_FIELDS)
    except ValueError:
        raise invalid(f"Too many parameters (at most {MAX_FIELDS})") from None
    tree: dict[str, Node] = {}
    for key, value in pairs:
        _insert(tree, key, value)
    return tree


def _split(key: str) -> list[str]:
    head, bracket, rest = key.partition("[")
    if not bracket:
        return [key]
    rest = "[" + rest
    segments = _SEGMENT.findall(rest)
    # A key whose brackets do not close is taken whole, as Rack does.
    if "".join(f"[{s}]" for s in segments) != rest:
        return [key]
    return [head, *segments]


def _insert(tree: dict[str, Node], key: str, value: str) -> None:
    path = _split(key)
    node: Any = tree
    for index, segment in enumerate(path):
        last = index == len(path) - 1
        if isinstance(node, list):
            # ``a[][b]=1&a[][c]=2`` builds one hash; a repeated member starts the next one.
            nxt = path[index + 1] if not last else None
            if last:
                node.append(value)
                return
            if segment != "":
                raise invalid(f"Invalid array: {key}", param=path[0])
            if not node or not isinstance(node[-1], dict) or nxt in node[-1]:
                node.append({})
            node = node[-1]
            continue
        if not isinstance(node, dict):
            raise invalid(f"Invalid hash: {key}", param=path[0])
        if last:
            if isinstance(node.get(segment), (dict, list)):
                raise invalid(f"Invalid hash: {key}", param=path[0])
            node[segment] = value
            return
        child = node.get(segment)
        if child is None:
            child = [] if path[index + 1] == "" else {}
            node[segment] = child
        elif isinstance(child, str):
            raise invalid(f"Invalid hash: {key}", param=path[0])
        node = child


def _as_list(value: Node) -> list[Node] | None:
    """A list, or a hash whose keys are ``0, 1, 2...`` (the libraries' indexed arrays)."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict) and all(k.isdigit() for k in value):
        return [value[k] for k in sorted(value, key=int)]
    return None


class Params:
    """Typed, validated reads of one request's parameters.

    Args:
        tree: the decoded parameters.
        prefix: how a nested hash's members are named in messages (``card[``).
    """

    def __init__(self, tree: Mapping[str, Node], prefix: str = "") -> None:
        self.tree = dict(tree)
        self.prefix = prefix

    def name(self, key: str) -> str:
        return f"{self.prefix}{key}]" if self.prefix else key

    def has(self, key: str) -> bool:
        return key in self.tree

    def only(self, allowed: Iterable[str]) -> None:
        """Refuse every parameter not in ``allowed``, as Stripe does.

        Raises:
            StripeError: ``Received unknown parameter: ...``.
        """
        known = set(allowed)
        for key in self.tree:
            if key not in known:
                raise invalid(f"Received unknown parameter: {self.name(key)}",
                              param=self.name(key))

    def _required(self, key: str) -> None:
        raise invalid(f"Missing required param: {self.name(key)}.", param=self.name(key))

    def string(self, key: str, *, required: bool = False, max_length: int = 5000,
               empty_is_none: bool = True) -> str | None:
        value = self.tree.get(key)
        if value is None:
            if required:
                self._required(key)
            return None
        if not isinstance(value, str):
            raise invalid(f"Invalid string: {self.name(key)}", param=self.name(key))
        if value == "" and empty_is_none:
            if required:
                self._required(key)
            return None
        if len(value) > max_length:
            raise invalid(f"Invalid string: {value[:20]}...; must be at most {max_length} "
                          "characters", param=self.name(key))
        return value

    def integer(self, key: str, *, required: bool = False, minimum: int | None = None,
                maximum: int | None = None) -> int | None:
        text = self.string(key, required=required)
        if text is None:
            return None
        if not re.fullmatch(r"-?\d{1,18}", text):
            raise invalid(f"Invalid integer: {text}", param=self.name(key))
        value = int(text)
        if minimum is not None and value < minimum:
            raise invalid(f"This value must be greater than or equal to {minimum}.",
                          param=self.name(key))
        if maximum is not None and value > maximum:
            raise invalid(f"This value must be less than or equal to {maximum}.",
                          param=self.name(key))
        return value

    def boolean(self, key: str, *, required: bool = False) -> bool | None:
        text = self.string(key, required=required)
        if text is None:
            return None
        if text not in ("true", "false"):
            raise invalid(f"Invalid boolean: {text}", param=self.name(key))
        return text == "true"

    def enum(self, key: str, choices: Iterable[str], *, required: bool = False) -> str | None:
        text = self.string(key, required=required)
        if text is None:
            return None
        options = list(choices)
        if text not in options:
            listed = (", ".join(options[:-1]) + ", or " + options[-1]) if len(options) > 1 \
                else options[0]
            raise invalid(f"Invalid {self.name(key)}: must be one of {listed}",
                          param=self.name(key))
        return text

    def hash(self, key: str, *, required: bool = False) -> Params | None:
        value = self.tree.get(key)
        if value is None or value == "":
            if required:
                self._required(key)
            return None
        if not isinstance(value, dict):
            raise invalid(f"Invalid hash: {self.name(key)}", param=self.name(key))
        return Params(value, prefix=f"{self.name(key)}[")

    def strings(self, key: str) -> list[str]:
        """An array of strings (``expand[]=a&expand[]=b`` or ``expand[0]=a``)."""
        value = self.tree.get(key)
        if value is None or value == "":
            return []
        items = _as_list(value)
        if items is None or not all(isinstance(item, str) for item in items):
            raise invalid(f"Invalid array: {self.name(key)}", param=self.name(key))
        return [str(item) for item in items]

    def metadata(self, key: str = "metadata") -> tuple[bool, dict[str, str]] | None:
        """Stripe's metadata update: ``(clear_all, changes)``; an empty value unsets a key.

        ``metadata=`` (empty) clears every key. At most 50 keys, keys up to 40 characters,
        values up to 500.

        Raises:
            StripeError: a non-hash value, or a limit exceeded.
        """
        value = self.tree.get(key)
        if value is None:
            return None
        if value == "":
            return True, {}
        if not isinstance(value, dict):
            raise invalid("Invalid hash", param=key)
        changes: dict[str, str] = {}
        for name, item in value.items():
            if not isinstance(item, str):
                raise invalid(f"Invalid value for {key}[{name}]: must be a string",
                              param=f"{key}[{name}]")
            if len(name) > 40:
                raise invalid(f"Metadata key length exceeds maximum of 40 characters: {name}",
                              param=f"{key}[{name}]")
            if len(item) > 500:
                raise invalid("Metadata values can have up to 500 characters, but you passed "
                              f"in a value that is {len(item)} characters.",
                              param=f"{key}[{name}]")
            changes[name] = item
        if len(changes) > 50:
            raise invalid("You can have at most 50 metadata keys.", param=key)
        return False, changes


def apply_metadata(current: dict[str, str], update: tuple[bool, dict[str, str]] | None) -> None:
    """Apply a :meth:`Params.metadata` update in place (keys stay in insertion order)."""
    if update is None:
        return
    clear, changes = update
    merged = {} if clear else dict(current)
    for key, value in changes.items():
        if value == "":
            merged.pop(key, None)
        else:
            merged[key] = value
    if len(merged) > 50:
        raise invalid("You can have at most 50 metadata keys.", param="metadata")
    current.clear()
    current.update(merged)
