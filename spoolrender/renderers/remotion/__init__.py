"""The Remotion renderer: one long-lived Node worker per job slot, and what it needs.

- :mod:`.renderer`: :class:`~.renderer.RemotionRenderer` (render, verify, split, join)
- :mod:`.node_worker`: one worker process (``worker/render-worker.mjs``) and its JSON-lines protocol
- :mod:`.project`: the user's Remotion project (where Remotion is installed, the bundle key)
- :mod:`.bundle_cache`: the project bundled once per content, for every process on the host
- :mod:`.splitting`: which jobs can be split, the chunk plan Remotion can join
- :mod:`.output_check`, :mod:`.join_check`: ffprobe checks of outputs, chunks and joined videos
- :mod:`.out_of_memory`: telling memory exhaustion from other failures
- :mod:`.worker_tmp`: each worker's private TMPDIR, and what dead ones left
- :mod:`.props_check`, :mod:`.project_setup`: submit's props check, ``init``'s project set-up
- ``worker/``: the Node side (package data), ``errors.mjs`` classifying a failure into its kind

May import: :mod:`spoolrender.renderers.base` and the layers below renderers (jobfile, config,
render_cache, spool, core).
"""
