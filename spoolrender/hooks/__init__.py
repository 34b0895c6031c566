"""Completion hooks: what a move to done/, retry/ or failed/ owes, delivered at least once.

- :mod:`.plan`: planned with the move (a marker in ``.spoolrender/hooks/pending/`` and the
  delivery state in the job directory), by :mod:`spoolrender.lifecycle.transitions`
- :mod:`.delivery`: one delivery (a command or a webhook POST) bounded by its timeout
- :mod:`.dispatcher`: :class:`~.dispatcher.HookDispatcher`, any runner's hooks thread: takes due
  markers, backs off by each hook's :class:`~spoolrender.core.retry_policy.RetryPolicy`, takes
  over a dead runner's deliveries

The ``hooks:`` setting is :mod:`spoolrender.config.hooks`.

May import: :mod:`spoolrender.intake` and below; not chunks (its sibling).
"""
