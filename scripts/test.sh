#!/usr/bin/env bash
# The test command: the README's, and the one CI runs. Sets up first (like the quick start).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh" --test
cd "$ROOT"
export PATH="$ROOT/.venv/bin:$PATH"
echo "==> ruff"; ruff check spoolrender tests bench docs/hooks
echo "==> ruff format --check"; ruff format --check spoolrender tests bench docs/hooks
echo "==> mypy"; mypy
# The packages' layers, no import cycle, forbidden imports: the contracts in pyproject.toml.
echo "==> lint-imports"; lint-imports --no-cache
# The documentation site, strictly: a broken link or anchor, a missing page, snippet or API
# reference fails it. Built into a temporary directory: only the check matters here.
echo "==> mkdocs build --strict"
site="$(mktemp -d)"
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet --site-dir "$site"   # the env var: no theme banner
rm -rf "$site"
# Four pytest-xdist workers on two cores: most tests wait on subprocesses (runners, renders,
# sshd), not on the CPU. loadgroup: a module's users of a warm module fixture, and a docs
# page's terminal, stay on one worker (tests/conftest.py). Later arguments win: `-n 0` runs
# the suite in this process alone, `-n 2` on two workers.
echo "==> pytest"; python -m pytest -n 4 --dist loadgroup "$@"
