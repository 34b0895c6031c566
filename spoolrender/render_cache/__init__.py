"""The render cache: verified outputs by cache key, on the output filesystem.

- :mod:`.keys`: cache keys (a digest of canonical JSON; file contents hashed once per version),
  which each renderer computes for its jobs
- :mod:`.entries`: the entries: lookup with verification, store, hard-linked hits, LRU eviction
- :mod:`.in_flight`: who renders a key now, so that identical jobs render once

Its step in a run (look up or wait before the render, store after the decision) is
:mod:`spoolrender.run.cache_step`.

May import: :mod:`spoolrender.spool` and below.
"""
