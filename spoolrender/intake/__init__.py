"""From a file in incoming/ to a claimed job: complete uploads, scans in queue order, the claim.

- :mod:`.completeness`: is an upload complete? (:func:`~.completeness.judge`: the local writer,
  inotify's and fanotify's close, settle time, in order)
- :mod:`.upload_writers`: who on this host still writes a file; :mod:`.upload_closers`: who
  closed it (fanotify) and whether that process still runs
- :mod:`.watch`: filesystem events that wake the runner early (hints; the listing is the truth)
- :mod:`.candidates`, :mod:`.scan`, :mod:`.retry_scan`: what can be claimed, in queue order,
  from incoming/ and from retry/ (due entries this host may take)
- :mod:`.claim`: the claim, one rename into running/ (a lost race is a normal outcome)
- :mod:`.owncopy`: the runner's read-only copy of every claimed job; :mod:`.seal`: the job a
  run renders from is the one accepted, byte for byte

May import: :mod:`spoolrender.hosts` and below (retry elsewhere; a claim's cancel token is
the renderers').
"""
