"""Hosts sharing a spool: which are online, which keep failing, and which are blocked.

- :mod:`.health`: online hosts (from beacons), failures per host, retrying a job elsewhere,
  the block marker of a host that fails many jobs (and which kinds are not its fault)
- :mod:`.blocks`: whether a block applies (another host serves every route it serves, the
  share of blocked hosts), and the probe job that lifts it

May import: :mod:`spoolrender.renderers` (kinds a renderer reports) and below.
"""
