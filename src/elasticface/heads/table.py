"""The heads listed from the registry, so that a new entry is listed with its defaults as written there: the table in
docs/heads.md (the docs build fills it in: docs/hooks/heads_table.py) and the lines of `python train.py --help`."""

from __future__ import annotations

from typing import Any

from .registry import HEADS, SUBCENTER_K, build_head

HEADER = (
    "| name | target logit (non-target) | top-level defaults | other arguments | auto path |\n"
    "| --- | --- | --- | --- | --- |"
)
#: what `build_head` does for a sub-centre name without an entry of its own
SUBCENTER_ABOUT = "any head above on the max over K sub-centres per class"
SUBCENTER_ROW = f"| `subcenter_<name>` | {SUBCENTER_ABOUT} | as `<name>` | k={SUBCENTER_K} | as `<name>` |"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def arguments_text(values: dict[str, Any]) -> str:
    """`k=v, ...` of the set values (an unset argument, None, is left out), or `-`."""
    return ", ".join(f"{k}={_value(v)}" for k, v in values.items() if v is not None) or "-"


def head_table() -> str:
    """One Markdown row per registry entry, in the registry's order: its formula, its top-level defaults, its
    other arguments and the path `model.classifier.path=auto` takes once the classes fill more than one chunk."""
    rows = [HEADER]
    for name, entry in HEADS.items():
        path = "chunked" if build_head(name).chunked_by_default else "dense"
        rows.append(
            f"| `{name}` | {entry.about or '-'} | {arguments_text(entry.top_level())} | {arguments_text(entry.args)} "
            f"| {path} |"
        )
    rows.append(SUBCENTER_ROW)
    return "\n".join(rows)


def head_lines(chosen: str | None = None) -> list[str]:
    """One plain-text line per registry entry (`python train.py --help`): its name (`*` when it is `chosen`), its
    top-level defaults and what it changes."""
    rows = [(name + ("*" if name == chosen else ""), arguments_text(entry.top_level()), entry.about.replace("`", ""))
            for name, entry in HEADS.items()]
    rows.append(("subcenter_<name>", f"k={SUBCENTER_K}", SUBCENTER_ABOUT))
    name_width, defaults_width = (max(len(row[i]) for row in rows) for i in (0, 1))
    return [f"{name:<{name_width}}  {defaults:<{defaults_width}}  {about}" for name, defaults, about in rows]
