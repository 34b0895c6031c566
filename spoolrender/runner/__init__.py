"""The runner: the loop that claims jobs into free slots, keeps them alive, recovers the dead
and drains.

- :mod:`.loop`: :class:`~.loop.Runner` (recover, sweep, scan, claim, beat, drain, signals)
- :mod:`.summary`: :class:`~.summary.RunSummary` and what the runs came to (failures, warnings)
- :mod:`.reports`: the runner's beacon (for ``status``) and metrics textfile
- :mod:`.host_block`: this host's block as the runner meets it, and the probe job
- :mod:`.slot_threads`: the slots' threads, kept for the runner's life
- :mod:`.capacity`: slots and threads per job from psutil
- :mod:`.fscheck`: the start-up probes of the spool's filesystem

May import: :mod:`spoolrender.ops` and below.
"""
