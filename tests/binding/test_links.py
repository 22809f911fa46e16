"""The signed links of notifications (undolog.links): what verifies, what does not, when
a link expires, and the keys and lifetimes the environment may hold."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest

from undolog import links

KEY = "links-test-key-0123456789"
AID = uuid.UUID("0b9f3c9e-2f4a-4d7e-9a51-5c3c1f2d8e01")
NOW = 1_800_000_000


def parts(url: str) -> tuple[str, str, str]:
    split = urlsplit(url)
    query = parse_qs(split.query)
    return split.path.rsplit("/", 1)[1], query["exp"][0], query["sig"][0]


def test_a_signed_url_names_the_request_and_its_expiry_and_verifies() -> None:
    url = links.signed_url("https://dash.example.test/ul/", AID, KEY, NOW + 60)
    assert url.startswith(f"https://dash.example.test/ul/open/{AID}?exp={NOW + 60}&sig=")
    aid, exp, sig = parts(url)
    assert len(sig) == 64 and int(sig, 16) >= 0
    assert links.check(KEY, aid, exp, sig, now=NOW) == "ok"
    assert links.check(KEY, aid, exp, sig, now=NOW + 59) == "ok"


def test_an_expired_link_is_expired_and_only_when_signed() -> None:
    aid, exp, sig = parts(links.signed_url("https://d", AID, KEY, NOW))
    assert links.check(KEY, aid, exp, sig, now=NOW) == "expired"
    assert links.check(KEY, aid, exp, sig, now=NOW + 1) == "expired"
    # a later expiry written over the signed one is not a longer life: it is invalid
    assert links.check(KEY, aid, str(NOW + 3600), sig, now=NOW + 1) == "invalid"


@pytest.mark.parametrize(
    "change",
    [
        "sig",
        "approval",
        "key",
        "no sig",
        "no exp",
        "exp not digits",
        "id not a uuid",
        "id upper case",
        "sig upper case",
    ],
)
def test_any_change_to_a_link_makes_it_invalid(change: str) -> None:
    aid, exp, sig = parts(links.signed_url("https://d", AID, KEY, NOW + 60))
    key: str = KEY
    got_sig: str | None = sig
    got_exp: str | None = exp
    if change == "sig":
        got_sig = sig[:-1] + ("0" if sig[-1] != "0" else "1")
    elif change == "approval":
        aid = str(uuid.uuid4())
    elif change == "key":
        key = KEY + "x"
    elif change == "no sig":
        got_sig = None
    elif change == "no exp":
        got_exp = None
    elif change == "exp not digits":
        got_exp = f"{exp}.0"
    elif change == "id not a uuid":
        aid = "../../sessions"
    elif change == "id upper case":
        aid = aid.upper()
    elif change == "sig upper case":
        got_sig = sig.upper()
    assert links.check(key, aid, got_exp, got_sig, now=NOW) == "invalid"


@pytest.mark.parametrize(
    "change",
    [
        "sig of non-ASCII letters",
        "sig of non-ASCII hex digits",
        "exp of Arabic-Indic digits",
        "exp of full-width digits",
        "id of full-width digits",
    ],
)
def test_a_link_with_non_ascii_parts_is_invalid_not_an_error(change: str) -> None:
    """Anyone may send a link's parts: a character outside ASCII is an invalid link, not
    a TypeError (hmac.compare_digest takes no such str) nor another spelling of a signed
    number (str.isdigit and int() take every script's digits)."""
    aid, exp, sig = parts(links.signed_url("https://d", AID, KEY, NOW + 60))
    if change == "sig of non-ASCII letters":
        sig = "\u00e9" * 64
    elif change == "sig of non-ASCII hex digits":
        sig = sig.translate({ord(d): 0xFF10 + int(d) for d in "0123456789"})  # full width
    elif change == "exp of Arabic-Indic digits":
        exp = exp.translate({ord(d): 0x0660 + int(d) for d in "0123456789"})
    elif change == "exp of full-width digits":
        exp = exp.translate({ord(d): 0xFF10 + int(d) for d in "0123456789"})
    elif change == "id of full-width digits":
        aid = aid.translate({ord(d): 0xFF10 + int(d) for d in "0123456789"})
    assert links.check(KEY, aid, exp, sig, now=NOW) == "invalid"


def test_the_expiry_is_the_lifetime_or_the_requests_deadline_if_sooner() -> None:
    assert links.expiry(600, None, now=NOW) == NOW + 600
    soon = datetime.fromtimestamp(NOW + 30, tz=UTC)
    later = datetime.fromtimestamp(NOW + 6000, tz=UTC)
    assert links.expiry(600, soon, now=NOW) == NOW + 30
    assert links.expiry(600, later, now=NOW) == NOW + 600


def test_the_environment_key_and_lifetime(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(links.SECRET_ENV, raising=False)
    monkeypatch.delenv(links.TTL_ENV, raising=False)
    assert links.secret_from_env() is None
    assert links.ttl_from_env() == links.DEFAULT_TTL
    monkeypatch.setenv(links.SECRET_ENV, "short")
    with pytest.raises(ValueError, match="at least 16"):
        links.secret_from_env()
    monkeypatch.setenv(links.SECRET_ENV, KEY)
    assert links.secret_from_env() == KEY
    monkeypatch.setenv(links.TTL_ENV, "3600")
    assert links.ttl_from_env() == 3600
    for bad in ("0", "-5", "1h"):
        monkeypatch.setenv(links.TTL_ENV, bad)
        with pytest.raises(ValueError, match="positive number of seconds"):
            links.ttl_from_env()
