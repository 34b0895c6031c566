"""spoolrender.yaml, ``SPOOLRENDER_*`` and ``--set``: typed and validated once, into the frozen
:class:`~.spool_config.SpoolConfig` every other layer reads.

- :mod:`.spool_config`: SpoolConfig, reading and merging the sources, ``settings_reference_markdown``
- :mod:`.settings`: the one table of settings (check, type, default, meaning), which the config,
  ``init``'s commented file and docs/configuration.md come from; :mod:`.setting_checks`: its checks
- :mod:`.yaml_loader`: spoolrender.yaml read as typed (YAML 1.2 booleans, keys named as typed)
- :mod:`.queues`: queue names, tags and routes (drop directories, runner order)
- :mod:`.hooks`: the ``hooks:`` setting; :mod:`.command_chunks`: the ``command_chunks:`` setting
- :mod:`.durations`: durations as typed (``90s``, ``12h``); :mod:`.secret_file`: secrets in files

May import: :mod:`spoolrender.spool` and below (layout for the spool's places).
"""
