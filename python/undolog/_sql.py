"""Where the engine's SQL lives: inside the installed wheel, or in the source tree."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def sql_root() -> Path:
    """The folder holding bootstrap.sql and migrations/.

    A wheel carries it as ``undolog/sql`` (pyproject's force-include); an editable
    install of the source tree finds the repository's ``sql/`` two levels up.
    """
    packaged = Path(str(resources.files("undolog"))) / "sql"
    if (packaged / "bootstrap.sql").is_file():
        return packaged
    source_tree = Path(__file__).resolve().parents[2] / "sql"
    if (source_tree / "bootstrap.sql").is_file():
        return source_tree
    raise FileNotFoundError("undolog's SQL files are missing from this installation")
