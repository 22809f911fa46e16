"""The call signature reproduces ../shared/vectors byte for byte and refuses what JSON
cannot carry exactly."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from undolog import SignatureError, call_signature, canonical_json


def _vector_files() -> list[Path]:
    """The copy kept in the repo, and the team's shared contract when it sits beside this
    clone (CI and developers' machines; UNDOLOG_VECTORS names another): both must pass,
    so a copy that drifts from the contract fails here."""
    here = Path(__file__).resolve().parent
    files = [here / "vectors" / "call_signature.json"]
    shared = (
        Path(os.environ["UNDOLOG_VECTORS"])
        if os.environ.get("UNDOLOG_VECTORS")
        else here.parent.parent / "shared" / "vectors" / "call_signature.json"
    )
    if shared.is_file():
        files.append(shared)
    return files


VECTOR_SETS: list[dict[str, Any]] = [
    json.loads(f.read_text(encoding="utf-8")) for f in _vector_files()
]
VECTORS = VECTOR_SETS[0]
ALL_VECTORS = [v for vs in VECTOR_SETS for v in vs["vectors"]]
ALL_REJECTS = [c for vs in VECTOR_SETS for c in vs["must_reject"]]


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


def test_u0000_is_refused_but_an_escaped_backslash_is_not() -> None:
    with pytest.raises(SignatureError, match="U\\+0000"):
        canonical_json({"text": "a\x00b"})
    with pytest.raises(SignatureError):
        canonical_json({"key\x00": 1})
    assert canonical_json({"text": "\\u0000"}) == b'{"text":"\\\\u0000"}'
