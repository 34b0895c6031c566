"""MkDocs hook: the configuration reference table, generated from the code's own table of settings.

docs/configuration.md holds the marker line below; at build time it is replaced with
``spoolrender.config.spool_config.settings_reference_markdown()``, so the documented keys, types and
defaults are the ones the config loader accepts and cannot drift from them.
"""

from __future__ import annotations

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

MARKER = "<!-- spoolrender:config-reference -->"


def settings_table() -> str:
    """The generated reference table (Markdown)."""
    from spoolrender.config.spool_config import settings_reference_markdown

    return settings_reference_markdown()


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Replace the marker line of a page with the table (every page may hold it; one does)."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, settings_table())
