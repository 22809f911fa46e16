#!/usr/bin/env bash
# docs/how-to/upgrading.md: upgrade the package, then the engine in each database.
set -euo pipefail

pip install --upgrade .          # or the new wheel: pip install --upgrade dist/undolog-*.whl
undolog migrate                  # applies only the migrations this database lacks
undolog migrate --json           # again: nothing left to apply
