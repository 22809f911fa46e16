"""Signed, expiring links to an approval request in the dashboard.

A notification's link names the request (its approval id) and when the link stops
working (unix seconds), signed with HMAC-SHA256 under a secret the operator gives both the
delivery worker and the dashboard (the environment variable :data:`SECRET_ENV`). The
link only OPENS the request: the dashboard still asks for a login, and the decision is
still the page's form (CSRF token and all). What the signature buys is that a link
forged, altered or past its time opens nothing and says nothing about any request: the
dashboard checks it before reading the database.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
import uuid
from datetime import datetime
from typing import Final, Literal

SECRET_ENV: Final = "UNDOLOG_LINK_SECRET"
"""The environment variable holding the links' HMAC key (worker and dashboard)."""
TTL_ENV: Final = "UNDOLOG_LINK_TTL"
"""The environment variable holding how long (seconds) a new link works."""
DEFAULT_TTL: Final = 7 * 24 * 3600
"""A link's life when :data:`TTL_ENV` is unset: a week (or the request's deadline)."""
MIN_SECRET: Final = 16
"""The shortest key accepted: a short one is guessed offline from one link."""
PATH: Final = "/open"
"""The dashboard's path of a signed link: ``/open/<approval id>?exp=...&sig=...``."""

Verdict = Literal["ok", "invalid", "expired"]


def secret_from_env() -> str | None:
    """The key in :data:`SECRET_ENV`, None when unset; raises ValueError when too short."""
    value = os.environ.get(SECRET_ENV, "")
    if not value:
        return None
    if len(value) < MIN_SECRET:
        raise ValueError(f"{SECRET_ENV} must hold at least {MIN_SECRET} characters")
    return value


def ttl_from_env() -> int:
    """Seconds a new link works (:data:`TTL_ENV`, default :data:`DEFAULT_TTL`)."""
    value = os.environ.get(TTL_ENV, "")
    if not value:
        return DEFAULT_TTL
    if not (value.isascii() and value.isdigit()) or int(value) <= 0:
        raise ValueError(f"{TTL_ENV} must be a positive number of seconds")
    return int(value)


def check_env() -> None:
    """Raises ValueError when the environment's key or lifetime cannot be used: what a
    worker checks at start, rather than fail every delivery."""
    secret_from_env()
    ttl_from_env()


def signature(secret: str, approval_id: uuid.UUID, expires: int) -> str:
    """The hex HMAC-SHA256 of ``v1.<approval id>.<expires>``: the version and the
    separators keep one link's fields from being re-cut into another's."""
    message = f"v1.{approval_id}.{expires}".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def expiry(ttl: int, deadline: datetime | None = None, *, now: float | None = None) -> int:
    """When a link stops working: ``ttl`` seconds after ``now`` (the notifications count
    from the request), or at the request's ``deadline`` if that comes first (the request
    cannot be decided after it anyway)."""
    until = int(time.time() if now is None else now) + ttl
    if deadline is not None:
        until = min(until, int(deadline.timestamp()))
    return until


def signed_url(base: str, approval_id: uuid.UUID, secret: str, expires: int) -> str:
    """The link: ``BASE/open/<approval id>?exp=<unix seconds>&sig=<hex>``."""
    sig = signature(secret, approval_id, expires)
    return f"{base.rstrip('/')}{PATH}/{approval_id}?exp={expires}&sig={sig}"


def check(
    secret: str,
    approval_id: str,
    expires: str | None,
    sig: str | None,
    *,
    now: float | None = None,
) -> Verdict:
    """Whether a link's parts are one this key signed (``invalid`` when not, whatever
    else is wrong), and then whether its time has passed (``expired``)."""
    try:
        aid = uuid.UUID(approval_id)
    except ValueError:
        return "invalid"
    # ASCII only: str.isdigit and int() take every script's digits (another spelling of
    # a signed expiry), and hmac.compare_digest raises TypeError on a str outside ASCII
    if not expires or not sig or not (expires + sig).isascii():
        return "invalid"
    if not expires.isdigit() or len(expires) > 12:
        return "invalid"
    # the canonical form of the id is signed: another spelling of it does not verify
    if str(aid) != approval_id:
        return "invalid"
    if not hmac.compare_digest(signature(secret, aid, int(expires)), sig):
        return "invalid"
    if (time.time() if now is None else now) >= int(expires):
        return "expired"
    return "ok"
