"""A real render command for tests: behaves as the job's props say.

argv: render_props.py OUTPUT PROPS_FILE
props: sleep (seconds, in steps that print PROGRESS), exit (exit code, after writing
nothing), content (bytes to write), pidfile (write our pid there), child_pidfile
(spawn a sleeping grandchild and write its pid: for process-tree kill tests),
fail_until_attempt (exit 75 while SPOOLRENDER_ATTEMPT < this), until_file (keep
rendering until this file exists: a test decides when the render ends), steps_file (print
each of the 10 PROGRESS steps only once this file holds at least its number, which the test
writes with support.spool_jobs.allow_steps: a test moves the render on step by step, 10 ends it),
marker (append a line to this file when the render completes: counts renders), content_pid
(write "rendered by PID" as the output), size (write that many bytes).
"""

import json
import os
import subprocess
import sys
import time

output, props_file = sys.argv[1], sys.argv[2]
with open(props_file) as props_fh:
    props = json.load(props_fh)


def write_pidfile(path: str, pid: int) -> None:
    # Written aside and renamed into place: a test that sees the file exist reads the
    # whole pid, never the empty file open() has just created.
    with open(path + ".tmp", "w") as fh:
        fh.write(str(pid))
    os.rename(path + ".tmp", path)


if props.get("pidfile"):
    write_pidfile(props["pidfile"], os.getpid())
if props.get("child_pidfile"):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    write_pidfile(props["child_pidfile"], child.pid)
attempt = int(os.environ.get("SPOOLRENDER_ATTEMPT", "1"))
if attempt < int(props.get("fail_until_attempt", 0)):
    print(f"transient trouble on attempt {attempt}", flush=True)
    sys.exit(75)
steps = 10


def steps_allowed() -> int:
    if not props.get("steps_file"):
        return steps
    try:
        with open(props["steps_file"]) as fh:
            return int(fh.read())
    except (FileNotFoundError, ValueError):  # not written yet (the test renames it into place)
        return 0


for i in range(steps):
    time.sleep(float(props.get("sleep", 0)) / steps)
    while steps_allowed() <= i:
        time.sleep(0.05)
    print(f"PROGRESS {(i + 1) / steps:.2f}", flush=True)
while props.get("until_file") and not os.path.exists(props["until_file"]):
    time.sleep(0.05)
if "exit" in props:
    print(props.get("message", "failing as asked"), flush=True)
    sys.exit(int(props["exit"]))
# Write in two halves with a pause, so a kill in between leaves a partial file behind.
if props.get("size"):
    content = b"v" * int(props["size"])
elif props.get("content_pid"):
    content = f"rendered by {os.getpid()}".encode()
else:
    content = props.get("content", "video bytes").encode()
with open(output, "wb") as out:
    out.write(content[: len(content) // 2])
    out.flush()
    time.sleep(float(props.get("half_pause", 0)))
    out.write(content[len(content) // 2 :])
if props.get("marker"):
    with open(props["marker"], "a") as fh:
        fh.write(f"{props.get('tag', '')} {os.getpid()}\n")
