#!/usr/bin/env python3
"""The cost of recording each publish's publisher (spoolrender.spool.output_index) beside the
publish itself.

``rerun: true`` may replace only an output its own id published last, and the file cannot
say who put it there, so every publish writes ``.spoolrender/outputs/<sha256 of the path>``
(a temporary file renamed over the entry, not fsynced: output_index.record_publish says
why). Measured here: N publishes of a 1 KiB
rendered file (publish.publish_output: link, unlink, fsync of the output directory), each
followed by the index write, timed apart, on the temp filesystem of this machine; medians
and the index's share of the two. The floor the rest of a job's lifecycle adds (claim,
records, done/ move) is in bench/queue_overhead.py (P2).

Reproduce:  .venv/bin/python bench/output_index.py [--publishes 500]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path, PurePosixPath

from spoolrender.spool.layout import SpoolLayout, init_spool
from spoolrender.spool.output_index import record_publish
from spoolrender.spool.publish import SCRATCH_DIR, publish_output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--publishes", type=int, default=500)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="spoolrender-bench-"))
    try:
        layout = SpoolLayout(base / "spool")
        init_spool(layout.root)
        output_root = base / "output"
        (output_root / SCRATCH_DIR).mkdir(parents=True)
        publish_s, index_s = [], []
        for i in range(args.publishes):
            temp = output_root / SCRATCH_DIR / f"render-{i}"
            with open(temp, "wb") as fh:
                fh.write(os.urandom(1024))
                os.fsync(fh.fileno())
            rel = PurePosixPath(f"videos/clip-{i:06d}.mp4")
            t0 = time.perf_counter()
            published = publish_output(output_root, rel, temp, replace=False)
            t1 = time.perf_counter()
            record_publish(layout, rel, f"clip-{i:06d}", f"{i:012x}", published.file)
            t2 = time.perf_counter()
            publish_s.append(t1 - t0)
            index_s.append(t2 - t1)
        pub, idx = statistics.median(publish_s) * 1000, statistics.median(index_s) * 1000
        print(f"machine: {os.cpu_count()} cores; {args.publishes} publishes of 1 KiB")
        print(f"publish (link, unlink, fsync dir)   median {pub:.3f} ms")
        print(f"outputs index entry (write+rename)  median {idx:.3f} ms ({idx / (pub + idx):.0%} of the two)")
        print(f"reproduce: .venv/bin/python bench/output_index.py --publishes {args.publishes}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
