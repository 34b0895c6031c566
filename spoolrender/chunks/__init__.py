"""Chunked rendering of long jobs: one job split into frame ranges that any runner on any
host renders, joined by one runner and published once (issue 14, part B).

- :mod:`.naming`: chunk entries' ids and uids, where a job's ledger and chunk files live
- :mod:`.plan`: whether and how to split (frame ranges of at least MIN_CHUNK_FRAMES)
- :mod:`.ledger`: the plan and the finished chunks of one job, and what each chunk is doing
- :mod:`.moves`: the renames that carry out chunk and split decisions, waking the parent
- :mod:`.runs`: the executor's part (a chunk's run, the parent's split and join runs)
- :mod:`.sweep`: waking parents that nobody will wake, removing what nobody needs
- :mod:`.command_config`: the spool config that lets ``renderer: command`` jobs be split
"""
