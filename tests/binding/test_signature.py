"""The call signature reproduces the vectors of tests/vectors/ byte for byte and refuses
what JSON cannot carry exactly.

tests/vectors/call_signature.json is the contract every client must reproduce
(docs/reference/signature.md). The signature tests read that copy and nothing else, so
the repository tests itself; one test compares it with the team's shared vectors when
they sit beside the clone, so a copy that drifts from them fails."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from undolog import SignatureError, call_signature, canonical_json
from undolog.signature import MAX_NESTING_DEPTH, check_storable

TESTS = Path(__file__).resolve().parents[1]
IN_REPO = TESTS / "vectors"


def _shared_vectors() -> Path:
    """The shared vectors' folder: UNDOLOG_VECTORS, else ../shared/vectors beside the
    clone (where the team keeps them on developers' machines and in CI)."""
    if os.environ.get("UNDOLOG_VECTORS"):
        return Path(os.environ["UNDOLOG_VECTORS"])
    return TESTS.parents[1] / "shared" / "vectors"


VECTORS: dict[str, Any] = json.loads((IN_REPO / "call_signature.json").read_text(encoding="utf-8"))
ALL_VECTORS = VECTORS["vectors"]
ALL_REJECTS = VECTORS["must_reject"]


def test_the_in_repo_vectors_are_the_shared_ones() -> None:
    shared = _shared_vectors()
    if not shared.is_dir():
        pytest.skip(f"no shared vectors at {shared} to compare with (set UNDOLOG_VECTORS)")
    mine = sorted(p.relative_to(IN_REPO).as_posix() for p in IN_REPO.rglob("*") if p.is_file())
    theirs = sorted(p.relative_to(shared).as_posix() for p in shared.rglob("*") if p.is_file())
    assert mine == theirs
    for name in mine:
        assert (IN_REPO / name).read_bytes() == (shared / name).read_bytes(), name


def test_the_vectors_are_not_empty() -> None:
    assert len(ALL_VECTORS) >= 5 and len(ALL_REJECTS) >= 5


@pytest.mark.parametrize("vector", ALL_VECTORS, ids=lambda v: f"{v['tool_name']}")
def test_vector_preimage_and_signature(vector: dict[str, Any]) -> None:
    preimage = canonical_json(
        [vector["session_id"], vector["step_index"], vector["tool_name"], vector["args"]]
    )
    assert preimage.decode("utf-8") == vector["canonical_preimage"]
    assert (
        call_signature(
            vector["session_id"], vector["step_index"], vector["tool_name"], vector["args"]
        )
        == vector["call_signature"]
    )


@pytest.mark.parametrize("case", ALL_REJECTS, ids=lambda c: c["why"])
def test_must_reject(case: dict[str, Any]) -> None:
    args = eval(case["args_python"])  # trusted test data: Python literals of the vectors file
    with pytest.raises(SignatureError):
        call_signature(uuid.uuid4(), 0, "tool", args)


def test_session_id_is_normalised_to_lowercase_hyphenated() -> None:
    sid = uuid.UUID("0b9e3c1e-6f7a-4c1e-9a57-3d1f1f0c2a11")
    args = {"to": "ada@example.com", "subject": "Hi"}
    expected = VECTORS["vectors"][0]["call_signature"]
    assert call_signature(sid, 0, "send_email", args) == expected
    assert call_signature(str(sid).upper(), 0, "send_email", args) == expected


@pytest.mark.parametrize(
    ("step", "tool", "args"),
    [(-1, "t", {}), (True, "t", {}), (1.0, "t", {}), (0, "", {}), (0, "t", [1])],
)
def test_bad_call_parts_are_refused(step: Any, tool: Any, args: Any) -> None:
    with pytest.raises(SignatureError):
        call_signature(uuid.uuid4(), step, tool, args)


def test_signature_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_u0000_is_signed_per_rfc_8785() -> None:
    # Valid JSON that every other client signs: \u0000 in the canonical form, no refusal.
    assert canonical_json({"text": "a\x00b"}) == b'{"text":"a\\u0000b"}'
    assert canonical_json({"key\x00": 1}) == b'{"key\\u0000":1}'
    assert canonical_json({"text": "\\u0000"}) == b'{"text":"\\\\u0000"}'
    assert len(call_signature(uuid.uuid4(), 0, "tool", {"text": "\x00"})) == 64


def _nested(depth: int) -> dict[str, Any]:
    """An args object of exactly ``depth`` levels: {"a": [[...]]}."""
    inner: Any = []
    for _ in range(depth - 2):
        inner = [inner]
    return {"a": inner} if depth > 1 else {}


def test_nesting_depth_has_one_documented_limit() -> None:
    assert MAX_NESTING_DEPTH == 64
    assert len(call_signature(uuid.uuid4(), 0, "tool", _nested(MAX_NESTING_DEPTH))) == 64
    with pytest.raises(SignatureError, match="deeper than the limit of 64 levels"):
        call_signature(uuid.uuid4(), 0, "tool", _nested(MAX_NESTING_DEPTH + 1))
    with pytest.raises(SignatureError, match="limit of 64"):
        canonical_json(_nested(MAX_NESTING_DEPTH + 1))


def test_deep_nesting_is_a_signature_error_not_a_recursion_error() -> None:
    # Python's recursion gives out near 1,000 levels; the check walks without recursion.
    for depth in (993, 5_000, 100_000):
        with pytest.raises(SignatureError, match="limit of 64"):
            call_signature(uuid.uuid4(), 0, "tool", _nested(depth))


def test_check_storable_refuses_u0000_with_the_clear_error() -> None:
    check_storable({"text": "\\u0000", "deep": _nested(MAX_NESTING_DEPTH - 1)})
    with pytest.raises(SignatureError, match="U\\+0000"):
        check_storable({"text": "a\x00b"})
    with pytest.raises(SignatureError, match="U\\+0000"):
        check_storable({"list": [{"key\x00": 1}]})
    with pytest.raises(SignatureError, match="limit of 64"):
        check_storable(_nested(MAX_NESTING_DEPTH + 1))
