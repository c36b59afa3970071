"""Rendering for humans (rich tables) and machines (JSON). The only module besides the CLI that prints."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

# Wide when piped (logs, CI), the terminal's width otherwise.
console = Console(width=None if sys.stdout.isatty() else 180)


def print_json(data: Any) -> None:
    """Machine-readable output on stdout (plain, never wrapped or coloured)."""
    print(json.dumps(data, indent=2, default=_jsonable, allow_nan=False))


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value == 0 or math.isnan(value):
            return f"{value:g}"
        return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:.3e}"
    if value is None:
        return "—"
    return str(value)


def table(title: str, rows: list[dict[str, Any]], columns: list[str] | None = None) -> None:
    """A rich table of dict rows (columns default to the first row's keys)."""
    if not rows:
        console.print(f"[bold]{title}[/bold]: (none)")
        return
    columns = columns or list(rows[0])
    out = Table(title=title, title_justify="left", header_style="bold")
    for column in columns:
        numeric = isinstance(rows[0].get(column), int | float) and not isinstance(rows[0].get(column), bool)
        out.add_column(column, justify="right" if numeric else "left", overflow="fold")
    for row in rows:
        out.add_row(*(fmt(row.get(column)) for column in columns))
    console.print(out)


def key_values(title: str, data: dict[str, Any]) -> None:
    out = Table(title=title, title_justify="left", show_header=False)
    out.add_column("key", style="bold")
    out.add_column("value", overflow="fold")
    for key, value in data.items():
        out.add_row(key, fmt(value) if not isinstance(value, dict | list) else json.dumps(value))
    console.print(out)
