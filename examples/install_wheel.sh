#!/usr/bin/env bash
# docs/how-to/install.md: install UndoLog into your own project's environment.
set -euo pipefail
# --8<-- [start:shown]

make dist                                # builds dist/undolog-0.1.0-py3-none-any.whl
pip install dist/undolog-0.1.0-py3-none-any.whl  # or, from the clone: pip install .
undolog migrate                          # the SQL ships inside the wheel
# --8<-- [end:shown]
