"""The package's version, in one place.

pyproject.toml reads it (``[tool.hatch.version]``) into the wheel's metadata,
``undolog.__version__`` and ``undolog --version`` are this, and the migration runner
writes it into ``undolog.version()`` (sql/functions/version.sql) when it applies that
file. A release changes this line and nothing else.
"""

__version__ = "0.1.0"
