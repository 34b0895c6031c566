"""A real render command for upload tests: writes "<bytes> <sha256>" of the job file it
rendered from (read while it runs, as a renderer that reads its job file would).

argv: job_hash.py OUTPUT JOB_FILE PROPS_FILE. props: sleep (seconds before reading).
"""

import hashlib
import json
import sys
import time

output, job_file, props_file = sys.argv[1], sys.argv[2], sys.argv[3]
with open(props_file) as fh:
    time.sleep(float(json.load(fh).get("sleep", 0)))
with open(job_file, "rb") as fh:
    data = fh.read()
with open(output, "w") as fh:
    fh.write(f"{len(data)} {hashlib.sha256(data).hexdigest()}")
