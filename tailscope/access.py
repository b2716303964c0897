"""Who may reach `serve` and `collect`: loopback or not, and the secret files they read.

A secret (collect's bearer token, the dashboard's shared password) is read from a file, never from
the command line, where any local user could read it in the process list.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

MIN_SECRET_CHARS = 16


class SecretFileError(ValueError):
    """A secret file that cannot be used; str() is one line naming the file."""


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the port on this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_secret_file(path: str | Path, what: str) -> str:
    """The secret in `path` (its first line, surrounding blanks removed): at least MIN_SECRET_CHARS
    characters, so that guessing it is hopeless."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise SecretFileError(f"{path}: cannot read the {what}: {reason}") from error
    lines = text.strip().splitlines()
    secret = lines[0].strip() if lines else ""
    if len(secret) < MIN_SECRET_CHARS:
        raise SecretFileError(
            f"{path}: the {what} must be at least {MIN_SECRET_CHARS} characters on the file's first line "
            f"(make one with: python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > {path})"
        )
    return secret
