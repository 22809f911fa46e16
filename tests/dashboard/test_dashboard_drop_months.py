"""The Maintenance page's "Drop old months" on a journal with more partitions than the
page lists (PARTITIONS_LIMIT, 200): the form lists every month it would drop, from the
whole set (the same rule as `undolog partitions plan`, undolog.partitions.months_to_drop),
and drops exactly the months confirmed; a set that changed between the list and the
confirmation drops nothing, and the person is told. On a real PostgreSQL, with the month
partitions made by the engine's own undolog.create_month_partitions."""

from __future__ import annotations

import html
import re
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient
from test_dashboard_maintenance import flash_of, log_in, partitions

from dashboard_helpers import csrf_of
from undolog import partitions as undolog_partitions
from undolog.dashboard import queries

Conn = psycopg.Connection[Any]

# 101 months, 2010-01 .. 2018-05: 202 partitions (the effect log's and its history's),
# more than the page lists even before the current months and the defaults
FIRST_YEAR, MONTHS = 2010, 101


def month_of(n: int) -> tuple[int, int]:
    return FIRST_YEAR + n // 12, n % 12 + 1


def old_names(months: range) -> list[str]:
    return sorted(
        f"{table}_{year}_{mon:02d}"
        for year, mon in map(month_of, months)
        for table in ("undolog_effect_log", "undolog_effect_history")
    )


def make_months(conn: Conn, months: range) -> None:
    """The old months, by the engine's own function, in one statement (fast)."""
    conn.execute(
        "SELECT undolog.create_month_partitions(m::date) FROM generate_series("
        "%s::timestamptz, %s::timestamptz, '1 month') AS m",
        (
            f"{month_of(months.start)[0]}-{month_of(months.start)[1]:02d}-01Z",
            f"{month_of(months.stop - 1)[0]}-{month_of(months.stop - 1)[1]:02d}-01Z",
        ),
    )


def confirm_token(page: str) -> str:
    found = re.search(r'name="confirm" value="([^"]+)"', page)
    assert found is not None, "no confirmation on the page"
    return found[1]


def listed(page: str) -> list[str]:
    return sorted(re.findall(r'<tr class="drop-row" id="drop-([a-z0-9_]+)"', page))


@pytest.fixture
def many(conn: Conn) -> list[str]:
    make_months(conn, range(MONTHS))
    names = old_names(range(MONTHS))
    assert set(names) <= set(partitions(conn))
    assert len(partitions(conn)) > queries.PARTITIONS_LIMIT
    return names


def test_the_form_lists_and_drops_every_month_beyond_the_pages_list(
    web: TestClient, conn: Conn, many: list[str]
) -> None:
    log_in(web, "dash_operator")
    page = web.get("/maintenance")
    # the page's own list stays bounded, and says how many it leaves off
    assert page.text.count('class="partition-row"') == queries.PARTITIONS_LIMIT
    hidden = len(partitions(conn)) - queries.PARTITIONS_LIMIT
    assert f"{hidden} more, older, are not" in page.text
    token = csrf_of(page.text)
    # the months before 2018-01: 96 months, 192 partitions; 2018-01..05 stay
    asked = web.post("/maintenance/drop", data={"csrf": token, "before": "2018-01"})
    assert asked.status_code == 200, html.unescape(asked.text)[:2000]
    assert 'id="drop-too-many"' not in asked.text
    doomed = old_names(range(96))
    assert listed(asked.text) == doomed  # every one, the oldest too
    assert f"Yes, drop these {len(doomed)} partitions" in asked.text
    assert set(doomed) <= set(partitions(conn))  # not yet
    done = web.post(
        "/maintenance/drop",
        data={"csrf": token, "before": "2018-01", "confirm": confirm_token(asked.text)},
    )
    assert done.status_code == 303, html.unescape(done.text)[:2000]
    left = set(partitions(conn))
    assert not set(doomed) & left  # exactly the confirmed months went
    assert set(old_names(range(96, MONTHS))) <= left  # and no other
    (said,) = flash_of(web.get("/maintenance").text)
    assert said.startswith("drop: dropped ") and said.endswith(" by dash_operator")


def test_a_set_that_changed_since_the_list_drops_nothing_and_says_so(
    web: TestClient, conn: Conn, many: list[str]
) -> None:
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/maintenance").text)
    asked = web.post("/maintenance/drop", data={"csrf": token, "before": "2018-01"})
    assert asked.status_code == 200
    # another month appears, beyond what the page lists, before the confirmation
    conn.execute("SELECT undolog.create_month_partitions('2009-12-01'::date)")
    before = partitions(conn)
    answer = web.post(
        "/maintenance/drop",
        data={"csrf": token, "before": "2018-01", "confirm": confirm_token(asked.text)},
    )
    assert answer.status_code == 409 and 'id="drop-stale"' in answer.text
    assert partitions(conn) == before  # nothing dropped
    # the list is read again, the new month in it, to confirm afresh
    assert "undolog_effect_log_2009_12" in listed(answer.text)
    assert len(listed(answer.text)) == 96 * 2 + 2


def test_a_month_that_appears_after_the_confirmation_was_taken_drops_nothing(
    web: TestClient, conn: Conn, many: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last guard: the engine's drop answers more months than were confirmed (a month
    attached between the confirmation's check and the drop; here the listing is made to
    miss one) and its transaction is rolled back: nothing is dropped, and the person is
    told."""
    real = undolog_partitions.months_to_drop

    def missing_one(parts: list[dict[str, Any]], cutoff: Any) -> list[dict[str, Any]]:
        return [p for p in real(parts, cutoff) if p["name"] != "undolog_effect_log_2010_01"]

    monkeypatch.setattr(undolog_partitions, "months_to_drop", missing_one)
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/maintenance").text)
    asked = web.post("/maintenance/drop", data={"csrf": token, "before": "2018-01"})
    assert "undolog_effect_log_2010_01" not in listed(asked.text)
    before = partitions(conn)
    answer = web.post(
        "/maintenance/drop",
        data={"csrf": token, "before": "2018-01", "confirm": confirm_token(asked.text)},
    )
    assert answer.status_code == 409, answer.status_code
    said = html.unescape(answer.text)
    assert 'id="drop-changed"' in answer.text and "nothing was dropped" in said
    assert partitions(conn) == before
