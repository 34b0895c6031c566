"""Carrying out decided runs, and taking over the jobs of dead runners.

- :mod:`.transitions`: :func:`~.transitions.carry_out`, the move a run record decided (retry/,
  failed/, split/, a chunk into its ledger, or the publish and done/), idempotent so that a
  recoverer rolls any crash forward; it plans the hooks the move owes
- :mod:`.recovery`: :class:`~.recovery.Recoverer`: entries of running/ whose owner is provably
  dead, parked claims given back, undecided runs decided as failed attempts; orphaned scratch
- :mod:`.rerun`: ``rerun: true`` replaces only an output its own id published last

May import: :mod:`spoolrender.hooks`, :mod:`spoolrender.chunks` and below.
"""
