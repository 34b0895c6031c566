#!/usr/bin/env bash
# Quick start: set everything up, then render the sample jobs end to end.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
export PATH="$ROOT/.venv/bin:$PATH"

spoolrender init spool >/dev/null
for job in remotion/sample-jobs/*.yaml; do
  name="$(basename "$job")"
  # A job id is published once; the samples say `rerun: true`, so a second quick start
  # renders them again instead of refusing them as duplicates.
  spoolrender submit --spool spool "$job" --name "$name" >/dev/null
done
echo "==> rendering $(ls remotion/sample-jobs/*.yaml | wc -l) sample jobs (spoolrender run --drain)"
# settle_seconds=0: `submit` renamed each file into place complete, so there is no upload
# to wait for (a runner that is already running learns that from the rename event).
spoolrender run --drain --spool spool --set settle_seconds=0
spoolrender status --spool spool
echo
echo "Videos:"
find spool/output -name '*.mp4' -not -path '*/.spoolrender-tmp/*' -printf '  %p  (%s bytes)\n' | sort
