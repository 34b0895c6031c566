"""`spoolrender serve`: the spool over HTTP (JSON API, event stream, metrics, dashboard).

The standard library's ``ThreadingHTTPServer`` is enough: the server reads a few small
files per request, each event stream holds one thread that mostly sleeps, and no extra
dependency has to be vetted for a process that listens on a network. It only reads the
spool (no runner runs in it), so it works on any host that mounts the spool; its actions
(retry, cancel, delete, submit) are :mod:`spoolrender.ops`'s, shared with the command line.

Layers, each importing only the ones below it (tests/e2e/test_serve.py checks this):

- :mod:`.server`: the process: the socket, connection caps, start and stop;
- :mod:`.routes`: the endpoints, one handler method each, and the route table;
- :mod:`.http`: the transport: parsing, limits, the Host check, auth, dispatch;
- :mod:`.api` (answers of the JSON API), :mod:`.bulk` (its bulk actions) and
  :mod:`.events` (the event stream's hub);
- :mod:`.readmodel`: job ids from requests to spool entries, shared by both;
- :mod:`.auth`: where the write token may come from, and checking a request's;
- :mod:`.listen`: listen addresses, the Host allowlist and options (no spool, no HTTP).

May import: :mod:`spoolrender.ops` and below, never runner, run, lifecycle, intake, hooks or
renderers directly (pyproject.toml's import-linter contracts).
"""
