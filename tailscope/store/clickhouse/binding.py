"""Values as ClickHouse parameter text: what chdb is handed for a `{name:Type}` parameter.

ClickHouse parses a server-side parameter's value in its escaped text format (the form a TSV field
has): top-level strings with backslash escapes, arrays and maps as literals with quoted strings.
clickhouse-connect writes them the same way for a server (tests compare the two through chdb).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any

_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\0": "\\0"}


def _escape(text: str) -> str:
    return "".join(_ESCAPES.get(ch, ch) for ch in text)


def _literal(value: Any) -> str:
    """A value inside an array or map parameter: strings quoted, NULL spelled out."""
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + _escape(value).replace("'", "\\'") + "'"
    if isinstance(value, datetime | date):
        return "'" + bind_value(value) + "'"
    return bind_value(value)


def bind_value(value: Any) -> str:
    """A Python value as the text ClickHouse parses for a `{name:Type}` parameter (escaped format)."""
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _escape(value)
    if isinstance(value, datetime):
        nanos = getattr(value, "nanosecond", 0)  # a pandas Timestamp keeps ns
        return value.strftime("%Y-%m-%d %H:%M:%S") + f".{value.microsecond * 1000 + nanos:09d}"
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{_literal(k)}:{_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Sequence | set | frozenset):
        return "[" + ",".join(_literal(v) for v in value) + "]"
    raise TypeError(f"cannot bind a {type(value).__name__} as a ClickHouse parameter")


def named_params(params: Sequence[Any] | Mapping[str, Any] | None) -> dict[str, Any]:
    """Parameters by name: a list binds to p1, p2, ... in order."""
    if params is None:
        return {}
    if isinstance(params, Mapping):
        return dict(params)
    return {f"p{i}": value for i, value in enumerate(params, start=1)}


def quote_identifier(name: str) -> str:
    """A ClickHouse identifier in backticks (a column of the exporter's schema, `Events.Timestamp`
    included); a name that would need escaping is refused: tables and columns are ours, not input."""
    if not name or "`" in name or "\\" in name:
        raise ValueError(f"not a plain identifier: {name!r}")
    return f"`{name}`"


def insert_statement(table: str, columns: Sequence[str], select_from: str | None = None) -> str:
    """`INSERT INTO table (columns)`, and `SELECT columns FROM select_from` when the rows come from a
    table function (chdb's Python(name): a Python object read in place) rather than with the insert."""
    listed = ", ".join(quote_identifier(c) for c in columns)
    statement = f"INSERT INTO {quote_identifier(table)} ({listed})"
    return statement if select_from is None else f"{statement} SELECT {listed} FROM {select_from}"
