#!/usr/bin/env python3
"""`spoolrender serve` paging through a big spool (issue 16 item 2): 100k done and 1k failed
jobs, 10k waiting; how long a page of `GET /jobs?state=done` takes, cold (the first, right
after the server started: it reads every finished job's time once, ahead, in a thread) and
warm (any later page), with a filter, and `GET /status` for comparison. Then the
dashboard's bulk retry (issue 24 item 1): ``POST /bulk`` choosing every failed job by
filter, as a dry run (the count the page confirms) and for real (each back to retry/).

Each finished job is a real job directory (bench/status_scale.py's fill); the server is a
real `spoolrender serve` subprocess on a loopback port. Times are wall medians of HTTP
requests from this process.

Reproduce:  .venv/bin/python bench/serve_browse.py [--done 100000] [--incoming 10000] [--failed 1000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from goals import goal
from status_scale import fill

CMD = [sys.executable, "-m", "spoolrender.cli"]
WARM_GOAL_S = 1.0
COLD_GOAL_S = 10.0
BULK_RETRY_GOAL_S = 10.0  # the dashboard's "retry all 1,000 failed": within a user's patience
TOKEN = "bench-token-0123456789abcdef"


def timed_post(port: int, path: str, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    data = json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.monotonic()
    conn.request("POST", path, body=data, headers=headers)
    resp = conn.getresponse()
    answer = json.loads(resp.read())
    elapsed = time.monotonic() - t0
    conn.close()
    assert resp.status == 200, (path, resp.status, answer)
    return elapsed, answer


def timed_get(port: int, path: str) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    t0 = time.monotonic()
    conn.request("GET", path)
    resp = conn.getresponse()
    resp.read()
    elapsed = time.monotonic() - t0
    conn.close()
    assert resp.status == 200, (path, resp.status)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--done", type=int, default=100_000)
    parser.add_argument("--incoming", type=int, default=10_000)
    parser.add_argument("--failed", type=int, default=1_000)
    parser.add_argument("--pages", type=int, default=20)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="spoolrender-bench-"))
    spool = base / "spool"
    proc = None
    try:
        subprocess.run([*CMD, "init", str(spool)], check=True, capture_output=True)
        (spool / "serve-token").write_text(TOKEN + "\n")
        (spool / "serve-token").chmod(0o600)
        with open(spool / "spoolrender.yaml", "a") as fh:
            fh.write("\nserve_token_file: serve-token\n")
        fill(spool, "done", 0, args.done)
        fill(spool, "failed", args.done, args.failed)
        for i in range(args.incoming):
            (spool / "incoming" / f"in-{i:06d}.yaml").write_bytes(b"composition: TitleCard\n")
        proc = subprocess.Popen([*CMD, "serve", "--spool", str(spool), "--listen", "127.0.0.1:0"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
        assert proc.stdout is not None
        m = re.match(r"serving http://127\.0\.0\.1:(\d+)/", proc.stdout.readline().decode())
        assert m, "serve did not start"
        port = int(m.group(1))
        print(
            f"machine: {os.cpu_count()} cores; spool: {args.done} done, {args.failed} failed, {args.incoming} incoming"
        )
        cold = timed_get(port, "/jobs?state=done&limit=50")
        rng = random.Random(1)
        warm = statistics.median(
            timed_get(port, f"/jobs?state=done&limit=50&offset={rng.randrange(args.done)}") for _ in range(args.pages)
        )
        filtered = statistics.median(timed_get(port, "/jobs?state=done&limit=50&q=job-00042") for _ in range(5))
        failed = statistics.median(timed_get(port, "/jobs?state=failed&kind=none&limit=50") for _ in range(5))
        status = statistics.median(timed_get(port, "/status") for _ in range(5))
        print(f"GET /jobs?state=done, first page after start:  {cold:.3f} s")
        print(f"GET /jobs?state=done, any later page (median):  {warm:.3f} s")
        print(f"GET /jobs?state=done&q=... (median):            {filtered:.3f} s")
        print(f"GET /jobs?state=failed&kind=... (median):       {failed:.3f} s")
        print(f"GET /status (median):                           {status:.3f} s")
        every_failed = {"action": "retry", "filter": {"state": "failed"}}
        planned_s, planned = timed_post(port, "/bulk", {**every_failed, "dry_run": True})
        retried_s, retried = timed_post(port, "/bulk", every_failed)
        assert planned["jobs"] == retried["jobs"] == args.failed, (planned["summary"], retried["summary"])
        assert len(os.listdir(spool / "retry")) == args.failed and not os.listdir(spool / "failed")
        print(f"POST /bulk retry, every failed job, dry run:    {planned_s:.3f} s ({planned['summary']})")
        print(f"POST /bulk retry, every failed job:             {retried_s:.3f} s ({retried['summary']})")
        print(goal(f"a warm page of done jobs at {args.done} done <= {WARM_GOAL_S:g} s", f"{warm:.3f} s",
                   warm <= WARM_GOAL_S))  # fmt: skip
        print(goal(f"the first page at {args.done} done <= {COLD_GOAL_S:g} s", f"{cold:.3f} s", cold <= COLD_GOAL_S))
        print(goal(f"bulk retry of {args.failed} failed jobs <= {BULK_RETRY_GOAL_S:g} s", f"{retried_s:.3f} s",
                   retried_s <= BULK_RETRY_GOAL_S))  # fmt: skip
        print(f"reproduce: .venv/bin/python bench/serve_browse.py --done {args.done} --incoming {args.incoming} "
              f"--failed {args.failed}")  # fmt: skip
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
            if proc.stdout is not None:
                proc.stdout.close()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
