"""A real render command for upload tests: writes "<bytes> <sha256>" of the job file it
rendered from (read while it runs, as a renderer that reads its job file would).

argv: job_hash.py OUTPUT JOB_FILE PROPS_FILE. props: sleep (seconds before reading),
wait_for (a path: the job file is read once it exists, for a test to act mid-run).
"""

import hashlib
import json
import os
import sys
import time

output, job_file, props_file = sys.argv[1], sys.argv[2], sys.argv[3]
with open(props_file) as fh:
    props = json.load(fh)
time.sleep(float(props.get("sleep", 0)))
if props.get("wait_for"):
    deadline = time.monotonic() + 300  # generous: a loaded machine, never a hang forever
    while not os.path.exists(props["wait_for"]):
        if time.monotonic() > deadline:
            sys.exit(f"job_hash: {props['wait_for']} did not appear within 300 s")
        time.sleep(0.05)
with open(job_file, "rb") as fh:
    data = fh.read()
with open(output, "w") as fh:
    fh.write(f"{len(data)} {hashlib.sha256(data).hexdigest()}")
