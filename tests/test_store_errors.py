"""How a driver's failure becomes one StoreError line: a full disk, a server gone mid-request."""

from __future__ import annotations

import errno
import logging

from tailscope.store.errors import (
    StoreFullError,
    StoreUnreachableError,
    classify,
    disk_full_cause,
    quiet_driver_logs,
    store_full,
)


def test_a_full_disk_is_recognised_through_the_exception_chain() -> None:
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("FATAL Error: Failed to rollback transaction") from None
    except RuntimeError as error:
        assert error.__cause__ is None and disk_full_cause(error) == "No space left on device"
    io = RuntimeError('IO Error: Could not write file "x.wal": No space left on device')
    assert disk_full_cause(io) == "No space left on device"
    assert disk_full_cause(OSError(errno.EDQUOT, "Disk quota exceeded")) == "Disk quota exceeded"
    assert disk_full_cause(RuntimeError("Code: 243. DB::Exception: Cannot reserve 3.01 MiB")) is not None
    assert disk_full_cause(OSError(errno.ENOENT, "No such file")) is None
    assert disk_full_cause(RuntimeError("Binder Error: column x")) is None


def test_store_full_is_one_line_naming_the_store_and_what_it_was_doing() -> None:
    error = store_full("/data/s.duckdb", "No space left on device", "loading t.jsonl")
    assert isinstance(error, StoreFullError) and "\n" not in str(error)
    assert str(error).startswith(
        "/data/s.duckdb: the disk is full (No space left on device) while loading t.jsonl"
    )


def test_clickhouse_messages_for_a_full_disk_and_a_server_gone_mid_request() -> None:
    assert classify(
        "Code: 243. DB::Exception: Cannot reserve 3.01 MiB, not enough space. (NOT_ENOUGH_SPACE)"
    ) is (StoreFullError)
    assert classify("Code: 1001. DB::Exception: write: No space left on device") is StoreFullError
    gone = (
        "Error ('Connection aborted.', RemoteDisconnected('Remote end closed connection without response')) "
        "executing HTTP request attempt 1 (http://127.0.0.1:37983)"
    )
    assert classify(gone) is StoreUnreachableError


def test_the_drivers_own_log_lines_are_not_printed(capsys) -> None:
    quiet_driver_logs()
    logging.getLogger("clickhouse_connect.driver.httpclient").error("Unexpected Http Driver Exception")
    assert "Unexpected" not in capsys.readouterr().err
