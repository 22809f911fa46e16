#!/usr/bin/env bash
# docs/how-to/upgrading.md: upgrade the package, then the engine in each database.
set -euo pipefail
# --8<-- [start:shown]

pip install --upgrade .          # or the new wheel: pip install --upgrade dist/undolog-*.whl
undolog status || true          # what a migrate would change (exit 1: one is due)
undolog migrate                  # applies only what this database lacks
undolog status                   # exit 0: up to date
# --8<-- [end:shown]
