#!/usr/bin/env bash
# The test command: the README's, and the one CI runs. Sets up first (like the quick start).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh" --test
cd "$ROOT"
export PATH="$ROOT/.venv/bin:$PATH"
echo "==> ruff"; ruff check spoolrender tests bench
echo "==> ruff format --check"; ruff format --check spoolrender tests bench
echo "==> mypy"; mypy
echo "==> pytest"; python -m pytest "$@"
