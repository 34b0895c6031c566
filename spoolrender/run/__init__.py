"""One run of one claimed job, from its claim to its next state.

- :mod:`.executor`: :class:`~.executor.JobExecutor`, one per slot: validate, reserve the id,
  render into scratch under the timeout and cancel token, verify, decide (the fenced run
  record), carry out
- :mod:`.admission`: whether a claimed job may run at all (its file read, unchanged since
  sealed, valid, the job it was claimed as, one queue, attempts left)
- :mod:`.split_runs`: :class:`~.split_runs.SplitJobRuns`, held by the executor (composed, not
  mixed in): a chunk's run, the split decision, the join
- :mod:`.cache_step`: the render cache in a run (look up or wait before, store after)
- :mod:`.deadlines`: job timeouts on one thread of the process
- :mod:`.run_end`: :class:`~.run_end.RunEnd`, how a run ended

May import: :mod:`spoolrender.lifecycle` and below.
"""
