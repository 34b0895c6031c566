"""A slow uploader on another host: appends to job files in steps, holding them open.

argv: slow_writer.py INTERVAL STEPS PATH [PATH...]. Creates each PATH with a job's head
(a complete job already: every prefix of whole lines is a job that parses, as a half-
written upload of a long file would be), then appends one comment line to each per step,
INTERVAL seconds apart, and closes at the end. Prints one JSON line per step with the
wall-clock time its writes returned ({"step": n, "t": ...}), then {"done": true, ...}.
"""

import json
import os
import sys
import time

interval, steps, paths = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
head = b"renderer: command\ncommand: jobhash\nprops: {sleep: 0}\n"
fds = [os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644) for path in paths]
for step in range(steps):
    for fd in fds:
        os.write(fd, (head if step == 0 else b"") + f"# step {step:04d} ".encode() + b"x" * 200 + b"\n")
    print(json.dumps({"step": step, "t": time.time()}), flush=True)
    if step < steps - 1:
        time.sleep(interval)
for fd in fds:
    os.close(fd)
print(json.dumps({"done": True, "t": time.time()}), flush=True)
