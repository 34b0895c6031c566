"""What operators and integrators read and do, as data: the read models and actions under
the command line, the dashboard and the Python API. Their text for people is cli's
(:mod:`spoolrender.cli.status_text`, :mod:`spoolrender.cli.show_text`); what stays here as
words is part of the data every client gets (a retry's or bulk action's ``text``, an error's
did-you-mean hint, the retention policy in ``status --json``).

- :mod:`.status`: the whole spool at a glance (``status``, ``status --json``); :mod:`.lookup`:
  a job by id in any state (``show``); :mod:`.split_progress`: a split job with its chunks'
  progress; :mod:`.listed_routes`, :mod:`.id_hints`
- :mod:`.control`: retry, cancel, pause, purge; :mod:`.bulk`: many chosen jobs at once;
  :mod:`.submission`: ``submit``; :mod:`.rerun_done`: ``rerun ID``
- :mod:`.metrics`: Prometheus metrics; :mod:`.runner_view`: what a runner is doing now
- :mod:`.retention`, :mod:`.retention_lease`: forgetting old finished jobs, one purger at a time
- :mod:`.outcome_events`: waking ``Job.wait()``

May import: :mod:`spoolrender.run` and below (in practice lifecycle, chunks, intake and lower).
"""
