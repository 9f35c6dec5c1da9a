"""Who may reach the app: loopback is open to this machine's users; any other address needs
credentials, or an explicit opt-out that is logged loudly.

Credentials come from the environment (`COPY_AS_DECODE_AUTH="user:password"`, several separated by
commas) or a file (`--auth-file PATH`, one `user:password` per line, `#` comments), never from a
command-line password (it would show in `ps` and the shell history).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

AUTH_ENV = "COPY_AS_DECODE_AUTH"
LOOPBACK_NAMES = ("localhost", "ip6-localhost")


class AccessError(ValueError):
    """The server must not start as asked; the message says how to fix it."""


@dataclass(frozen=True)
class Access:
    credentials: tuple[tuple[str, str], ...]  # empty: no login
    warning: str | None = None                 # printed loudly at start when set


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def parse_credentials(text: str, where: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for number, entry in enumerate(text.replace(",", "\n").splitlines(), start=1):
        entry = entry.strip()
        if not entry or entry.startswith("#"):
            continue
        user, colon, password = entry.partition(":")
        if not colon or not user.strip() or not password:
            raise AccessError(f"{where}: entry {number} is not user:password")
        pairs.append((user.strip(), password))
    if not pairs:
        raise AccessError(f"{where} holds no user:password entry")
    return tuple(pairs)


def resolve_access(
    host: str, *, auth_file: str | None = None, insecure_no_auth: bool = False, environ: dict[str, str] | None = None,
) -> Access:
    """The login the server needs for `host`. AccessError: a non-loopback address without
    credentials and without the explicit opt-out, or unreadable credentials."""
    environ = dict(os.environ) if environ is None else environ
    credentials: tuple[tuple[str, str], ...] = ()
    if auth_file:
        try:
            credentials = parse_credentials(Path(auth_file).read_text(encoding="utf-8"), f"--auth-file {auth_file}")
        except OSError as error:
            raise AccessError(f"cannot read --auth-file {auth_file}: {error.strerror}") from None
    elif environ.get(AUTH_ENV, "").strip():
        credentials = parse_credentials(environ[AUTH_ENV], f"${AUTH_ENV}")
    if credentials or is_loopback(host):
        return Access(credentials)
    if insecure_no_auth:
        return Access((), warning=(
            f"WARNING: serving on {host} WITHOUT A LOGIN (--insecure-no-auth): anyone who can reach this port "
            "can run edits and read, export and delete every stored session and annotation."
        ))
    raise AccessError(
        f"--host {host} serves beyond this machine: set ${AUTH_ENV}=user:password or pass --auth-file PATH "
        "(one user:password per line), or --insecure-no-auth to serve without a login"
    )
