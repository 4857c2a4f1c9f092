"""MkDocs hook: fills the marker in heads.md with the table of the heads, generated from the registry
(elasticface.heads.table), so that the page lists every `head=<name>` option with its defaults as written there."""

from __future__ import annotations

from typing import Any

MARKER = "<!-- heads-table -->"
PAGE = "heads.md"


def fill(markdown: str) -> str:
    """`markdown` with the marker replaced by the table; an error if the page has lost its marker."""
    from elasticface.heads.table import head_table

    if MARKER not in markdown:
        raise ValueError(f"docs/{PAGE}: no {MARKER} line for the generated table of the heads")
    return markdown.replace(MARKER, head_table())


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    return fill(markdown) if page.file.src_uri == PAGE else markdown
