"""The kinds of value a config key accepts, each with its check and its one-line description.

A rule checks one value and raises the project's user errors (utils/errors.py) naming the key, what was found and
what was expected; `describe` is the same rule in words, for `--help` and docs. The table of which key takes which
rule is utils/config_rules.py.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from elasticface.utils.errors import BadValue, MissingPath


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class Number:
    """A number in [low, high] (or (low, high] with `above`), an integer where `integer`; `words` are the other
    values the key takes (auto, null, -1 ...)."""

    low: float | None = None
    high: float | None = None
    above: float | None = None  # strictly greater than this
    integer: bool = False
    words: tuple[Any, ...] = (None,)
    doc: str = ""

    def check(self, key: str, value: Any) -> None:
        if any(value is w or (type(value) is type(w) and value == w) for w in self.words):
            return
        if not _is_number(value) or (self.integer and not float(value).is_integer()) or not math.isfinite(value):
            raise BadValue(f"{key}={value!r}: expected {self.expected()}")
        out = ((self.low is not None and value < self.low) or (self.high is not None and value > self.high)
               or (self.above is not None and not value > self.above))
        if out:
            raise BadValue(f"{key}={value!r}: out of range; expected {self.expected()}")

    def expected(self) -> str:
        kind = "an integer" if self.integer else "a number"
        bounds = []
        if self.above is not None:
            bounds.append(f"> {self.above:g}")
        if self.low is not None:
            bounds.append(f">= {self.low:g}")
        if self.high is not None:
            bounds.append(f"<= {self.high:g}")
        words = [("null" if w is None else str(w)) for w in self.words]
        text = f"{kind} {' and '.join(bounds)}".rstrip()
        return text + (f", or {', '.join(words)}" if words else "")

    def describe(self) -> str:
        return self.expected()


@dataclass(frozen=True)
class Numbers:
    """A list of numbers, each as `item` says; `nonempty` where an empty list means nothing to do."""

    item: Number
    nonempty: bool = True
    nullable: bool = True
    doc: str = ""

    def check(self, key: str, value: Any) -> None:
        if value is None and self.nullable:
            return
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise BadValue(f"{key}={value!r}: expected a list, each {self.item.expected()}, e.g. {key}=[1,2]")
        if self.nonempty and not value:
            raise BadValue(f"{key}=[]: expected at least one value")
        for item in value:
            try:
                self.item.check(key, item)
            except BadValue:
                raise BadValue(f"{key}={list(value)!r}: {item!r} is not {self.item.expected()}") from None

    def describe(self) -> str:
        return f"a list, each {self.item.expected()}"


@dataclass(frozen=True)
class Choice:
    """One of a fixed set of values."""

    values: tuple[Any, ...]
    doc: str = ""

    def check(self, key: str, value: Any) -> None:
        if isinstance(value, str):
            found = any(isinstance(v, str) and v.lower() == value.lower() for v in self.values)
        else:
            found = any(value == v and type(value) is type(v) for v in self.values)
        if not found:
            raise BadValue(f"{key}={value!r}: expected one of {self.describe()}")

    def describe(self) -> str:
        shown = ("null" if v is None else str(v).lower() if isinstance(v, bool) else str(v) for v in self.values)
        return ", ".join(dict.fromkeys(shown))


@dataclass(frozen=True)
class Name:
    """A non-empty name whose meaning a library checks when it builds (a timm model name); null too where
    `nullable`."""

    what: str
    nullable: bool = False
    doc: str = ""

    def check(self, key: str, value: Any) -> None:
        if value is None and self.nullable:
            return
        if not isinstance(value, str) or not value.strip():
            raise BadValue(f"{key}={value!r}: expected {self.what}")

    def describe(self) -> str:
        return self.what + (", or null" if self.nullable else "")


@dataclass(frozen=True)
class Address:
    """Where a service is: a URI whose scheme is one of `schemes`, or anything without a scheme (a folder, a bare
    word such as `databricks`). A one-letter scheme is a Windows drive (`C:\\runs`), so a folder too."""

    what: str
    schemes: tuple[str, ...]
    doc: str = ""

    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, str) or not value.strip():
            raise BadValue(f"{key}={value!r}: expected {self.what}")
        scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]+):", value)
        if scheme and scheme.group(1).lower() not in self.schemes:
            raise BadValue(f"{key}={value}: {scheme.group(1)}: is not one of the schemes {', '.join(self.schemes)}; "
                           f"expected {self.what}")

    def describe(self) -> str:
        return self.what


Layout = Callable[[str, str], None]


@dataclass(frozen=True)
class PathOf:
    """A path that must exist and hold what `layout` checks (a function raising the project's user errors, given
    the key and the path); null is allowed where `nullable`. Relative paths are taken from the working directory,
    as the runs take them."""

    what: str
    layout: Layout | None = None
    nullable: bool = True
    doc: str = ""
    each: bool = False  # the value may be a list of such paths
    extra: tuple[str, ...] = field(default=())  # other values the key takes (e.g. auto)

    def check(self, key: str, value: Any) -> None:
        if value is None and self.nullable or value in self.extra:
            return
        if self.each and isinstance(value, Sequence) and not isinstance(value, str):
            for item in value:
                self.check(key, item)
            return
        if not isinstance(value, (str, os.PathLike)) or not str(value):
            raise BadValue(f"{key}={value!r}: expected the path of {self.what}")
        path = os.fspath(value)
        if not os.path.exists(path):
            raise MissingPath(f"{key}={path}: no such file or folder (from {os.getcwd()}); expected {self.what}")
        if self.layout is not None:
            self.layout(key, path)

    def describe(self) -> str:
        return self.what + (", or null" if self.nullable else "")


@dataclass(frozen=True)
class ByChoice:
    """The rule depends on a config group's choice (data.root is a RecordIO folder with data=recordio, a folder of
    people with data=folder); a choice without a rule leaves the key unchecked."""

    group: str
    rules: dict[str, Number | Numbers | Choice | PathOf | Name]
    doc: str = ""

    def pick(self, choices: dict[str, Any]) -> Number | Numbers | Choice | PathOf | Name | None:
        return self.rules.get(str(choices.get(self.group)))

    def check(self, key: str, value: Any, choices: dict[str, Any] | None = None) -> None:
        rule = self.pick(choices or {})
        if rule is not None:
            rule.check(key, value)

    def describe(self) -> str:
        return "; ".join(f"with {self.group}={name}: {rule.describe()}" for name, rule in self.rules.items())


Rule = Number | Numbers | Choice | PathOf | Name | Address | ByChoice
