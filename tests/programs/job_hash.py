"""A real render command for upload tests: writes "<bytes> <sha256>" of the job file it
rendered from (read while it runs, as a renderer that reads its job file would).

argv: job_hash.py OUTPUT JOB_FILE PROPS_FILE. props: sleep (seconds before reading),
wait_for (a path: the job file is read once it exists, for a test to act mid-run),
read_marker (a path created once the job file was read), hold_until (a path: the render
ends only once it exists, so a test acts between the read and the decision; with
consume_hold the render removes it once seen, so the next run waits for a new one),
fail_until_attempt (exit 75, transient, while SPOOLRENDER_ATTEMPT is lower).
"""

import contextlib
import hashlib
import json
import os
import sys
import time

output, job_file, props_file = sys.argv[1], sys.argv[2], sys.argv[3]
with open(props_file) as fh:
    props = json.load(fh)
if int(os.environ.get("SPOOLRENDER_ATTEMPT", "1")) < int(props.get("fail_until_attempt", 0)):
    sys.exit(75)


def wait_for(path: str) -> None:
    deadline = time.monotonic() + 300  # generous: a loaded machine, never a hang forever
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            sys.exit(f"job_hash: {path} did not appear within 300 s")
        time.sleep(0.05)


time.sleep(float(props.get("sleep", 0)))
if props.get("wait_for"):
    wait_for(props["wait_for"])
with open(job_file, "rb") as job_fh:
    data = job_fh.read()
if props.get("read_marker"):
    open(props["read_marker"], "w").close()
with open(output, "w") as fh:
    fh.write(f"{len(data)} {hashlib.sha256(data).hexdigest()}")
if props.get("hold_until"):
    wait_for(props["hold_until"])
    if props.get("consume_hold"):
        # Taken: a later run of the same job waits for the test to release it again, even if
        # it starts before the test has seen this run's decision.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(props["hold_until"])
