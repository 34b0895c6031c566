"""The words every layer shares, and nothing else: the bottom layer.

- :mod:`.vocabulary`: job states, run outcomes, cancel reasons and failure kinds as str enums
  (the strings on disk; a kind no member names passes through)
- :mod:`.run_error`: :class:`~.run_error.RunError`, why a run did not publish (a run record's ``error``)
- :mod:`.retry_policy`: :class:`~.retry_policy.RetryPolicy`, the one backoff of everything tried again
- :mod:`.failpoints`: named crash and pause points for the reliability tests
- :mod:`.safe_text`: spool text made safe to show a person; :mod:`.suggest`: did-you-mean
- :mod:`.version`: ``__version__``

May import: nothing of spoolrender but core itself (``errors`` and ``defaults``, the top-level
modules every layer uses, are the layer just above it).
"""
