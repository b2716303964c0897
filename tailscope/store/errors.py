"""Why a store cannot be used, one exception class per way, each with a one-line message.

Every engine's failures end up here (tailscope.store.clickhouse maps ClickHouse's error codes with
`classify`), so a command prints one sentence and exits instead of a driver's traceback. The
messages name the store by its URL with the password replaced (StoreLocation.url).
"""

from __future__ import annotations

import errno
import re


class StoreError(RuntimeError):
    """A store cannot be used as asked; str() is one line meant for the user."""


class StoreUnreachableError(StoreError):
    """No ClickHouse server answers at the URL's host and port."""


class StoreAuthError(StoreError):
    """The server answered but refused the user or password (or the user lacks a grant)."""


class TableMissingError(StoreError):
    """The database has no otel_traces table (the Collector's exporter has not created it)."""


class SchemaMismatchError(StoreError):
    """otel_traces exists but its columns are not the exporter's (another schema version)."""


class QueryTimeoutError(StoreError):
    """A query ran longer than the store's time limit (max_execution_time)."""


class StoreLockedError(StoreError):
    """A chdb data folder is held by another process (one process per folder)."""


class StoreBusyError(StoreError):
    """A DuckDB store stayed locked by another process for longer than we were willing to wait."""


class StoreVersionError(StoreError):
    """The store was written by a schema version this tailscope cannot use as it is."""


class MigrationError(StoreError):
    """A migration failed and was rolled back: the store is as it was."""


class UnsupportedError(StoreError):
    """The store's engine does not do what was asked (a DuckDB store's runs are not selections)."""


class ValueRefusedError(StoreError):
    """The engine refused a value the statement was given (a regex RE2 cannot compile)."""


class StoreFullError(StoreError):
    """The filesystem under the store is full (or over quota): the write that met it was rolled
    back, so the store is as it was before it and opens again; commands exit 2 on it. `store` and
    `cause` are set when it was made by store_full (None when classified from a server's message)."""

    store: str | None = None
    cause: str = "No space left on device"


_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_FULL_TEXTS = ("No space left on device", "Disk quota exceeded", "NOT_ENOUGH_SPACE")


def disk_full_cause(error: BaseException) -> str | None:
    """'No space left on device' (or the quota's message) when `error`, or an error it was raised
    from or while handling, says the disk is full; None otherwise. DuckDB reports a full disk as an
    IOException, then as a FatalException when its rollback cannot write either."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _FULL_ERRNOS:
            return current.strerror or "No space left on device"
        text = str(current)
        for full in _FULL_TEXTS:
            if full in text:
                return "No space left on device" if full == "NOT_ENOUGH_SPACE" else full
        if error_code(text) == 243:
            return "not enough space on the disk"
        current = current.__cause__ or current.__context__
    return None


def store_full(store: str, cause: str, doing: str = "writing") -> StoreFullError:
    """The one-line StoreFullError for `store` (its path or URL)."""
    error = StoreFullError(
        f"{store}: the disk is full ({cause}) while {doing}; nothing of it was stored and the store is "
        "as it was before (earlier data intact): free some space and run it again"
    )
    error.store, error.cause = store, cause
    return error


# ClickHouse error codes (src/Common/ErrorCodes.cpp) that mean one of the classes above.
_CODES: dict[int, type[StoreError]] = {
    159: QueryTimeoutError,  # TIMEOUT_EXCEEDED
    60: TableMissingError,  # UNKNOWN_TABLE
    81: TableMissingError,  # UNKNOWN_DATABASE
    192: StoreAuthError,  # UNKNOWN_USER
    193: StoreAuthError,  # WRONG_PASSWORD
    194: StoreAuthError,  # REQUIRED_PASSWORD
    497: StoreAuthError,  # ACCESS_DENIED
    516: StoreAuthError,  # AUTHENTICATION_FAILED
    209: StoreUnreachableError,  # SOCKET_TIMEOUT
    210: StoreUnreachableError,  # NETWORK_ERROR
    427: ValueRefusedError,  # CANNOT_COMPILE_REGEXP
    243: StoreFullError,  # NOT_ENOUGH_SPACE
}
_CODE = re.compile(r"Code: (\d+)\.")
_UNREACHABLE = (
    "Connection refused",
    "Failed to establish a new connection",
    "Name or service not known",
    "timed out",
    "No route to host",
    "Temporary failure in name resolution",
    "Remote end closed connection",  # the server went away mid-request (killed, restarted)
    "Connection aborted",
    "Connection reset by peer",
)


def quiet_driver_logs() -> None:
    """The drivers' own log lines ("Unexpected Http Driver Exception") go nowhere: the error they
    come with reaches the user as one StoreError line instead."""
    import logging

    for name in ("clickhouse_connect",):
        driver = logging.getLogger(name)
        driver.addHandler(logging.NullHandler())
        driver.propagate = False


def error_code(message: str) -> int | None:
    """The ClickHouse error code in a server or chdb message ('Code: 159. DB::Exception: ...')."""
    match = _CODE.search(message)
    return int(match.group(1)) if match else None


def first_line(message: str) -> str:
    """A driver's message cut to its first sentence-bearing line, without the stack trace."""
    line = next((part.strip() for part in message.splitlines() if part.strip()), "")
    line = re.sub(r"\s*\(version [^)]*\)\s*$", "", line)
    line = line.split(" Stack trace")[0]
    return line[:300]


def classify(message: str) -> type[StoreError] | None:
    """Which StoreError a ClickHouse (or HTTP driver) message means, None for an ordinary SQL error."""
    code = error_code(message)
    if code in _CODES:
        return _CODES[code]
    if any(text in message for text in _FULL_TEXTS):  # (a write error carrying the OS's ENOSPC)
        return StoreFullError
    if code is None and any(text in message for text in _UNREACHABLE):
        return StoreUnreachableError
    return None


def why_refused(message: str) -> str:
    """RE2's reason, as DuckDB words it ('... Error: missing ): (a') from either engine's message
    (ClickHouse: '... cannot compile re2: (?i)(a, error: missing ): (?i)(a. Look at ...', the
    pattern with the case-insensitive prefix the rules add)."""
    found = re.search(r", error: (.*?)\. Look at", message)
    if found:
        return found.group(1).replace("(?i)", "")
    return message.split("Error:", 1)[-1].strip()
