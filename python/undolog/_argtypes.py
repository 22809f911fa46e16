"""Command-line value types shared by the ``undolog`` command and the faces that parse
their own command line (``python -m undolog.dashboard``), which may not import the
command (tests/layout/test_import_graph.py)."""

from __future__ import annotations

import argparse
import math


def port_number(value: str) -> int:
    """A TCP port, 0 to 65535 (0: one the system picks)."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number (0 to 65535): {number}")
    return number


def idle_minutes(value: str) -> float:
    """Minutes before an idle web session is logged out: a positive, finite number (NaN
    would never log anyone out, 0 or less everyone at once)."""
    try:
        minutes = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a positive number of minutes: {value!r}") from None
    if not (minutes > 0 and math.isfinite(minutes * 60)):
        raise argparse.ArgumentTypeError(f"not a positive number of minutes: {value!r}")
    return minutes
