"""The spool on disk: every on-disk operation and name, the one owner of what a spool is.

Names and places: :mod:`.layout` (directories, entry names that encode queue order, ``init``),
:mod:`.chunk_names` (a split job's pieces: chunk entries, its ledger, chunk files),
:mod:`.heartbeat_file`, :mod:`.ids` (id reservations), :mod:`.output_index` (who published an
output last), :mod:`.job_file_modes` (who may read what the runner writes beside a job),
:mod:`.state_listings` (every job, from listings taken while jobs move), :mod:`.job_entries`
(which entries are one job's: the rule every lookup of a job by id is built on).
Durable operations: :mod:`.durable` (atomic, fsynced writes, exclusive creates, renames),
:mod:`.indented_json` (the records' bytes), :mod:`.spooldir`, :mod:`.held_dirs` and
:mod:`.tree_removal` (everything through held directory descriptors, never a swapped name),
:mod:`.background_removal`, :mod:`.records` (run records and the exclusive decision).
Liveness: :mod:`.heartbeat` (heartbeats, locks, judging an owner dead), :mod:`.beacons`,
:mod:`.clock` (the host's clocks and the spool filesystem's). The filesystem itself:
:mod:`.io_trouble` (full, read-only, failing: one condition and its backoff),
:mod:`.netcache` (a file as the server has it), :mod:`.glusterfs`, :mod:`.probe_dirs`.
Under the output root: :mod:`.trusted_dirs` (directories the runner may trust) and
:mod:`.publish` (scratch dirs; the no-follow, no-clobber publish).

May import: :mod:`spoolrender.core`, ``errors``, ``defaults``. Nothing here knows job files,
the config or what a run is: callers pass paths, names and values.
"""
