"""Split jobs: one job rendered in frame ranges by any runner on any host, joined once.

- :mod:`.plan`: whether and how to split (frame ranges of at least MIN_CHUNK_FRAMES)
- :mod:`.ledger`: the plan and the finished chunks of one job, and what each chunk is doing
- :mod:`.moves`: the renames that carry out chunk and split decisions, waking the job
- :mod:`.sweep`: waking jobs that nobody will wake, removing what nobody needs

A split job's runs (a chunk's, the split decision, the join) are :mod:`spoolrender.run.split_runs`;
the ``command_chunks:`` setting is :mod:`spoolrender.config.command_chunks`; the names of its
pieces (chunk entries' ids and uids, where the ledger and chunk files live) are the spool's,
:mod:`spoolrender.spool.chunk_names`; how a split job shows in status, show and serve is a read
model, :mod:`spoolrender.ops.split_progress`.

May import: :mod:`spoolrender.intake` (the job's copy and seal) and below; not hooks (its sibling).
"""
