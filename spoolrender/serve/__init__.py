"""`spoolrender serve`: the spool over HTTP (JSON API, event stream, metrics, dashboard).

The standard library's ``ThreadingHTTPServer`` is enough: the server reads a few small
files per request, each event stream holds one thread that mostly sleeps, and no extra
dependency has to be vetted for a process that listens on a network. It only reads the
spool (no runner runs in it), so it works on any host that mounts the spool.

Layers, each importing only the ones below it (tests/test_serve.py checks this):

- :mod:`.server`: the process: the socket, connection caps, start and stop;
- :mod:`.http`: the transport: parsing, limits, the Host check, auth, routing;
- :mod:`.api` (answers of the JSON API) and :mod:`.events` (the event stream's hub);
- :mod:`.readmodel`: job ids from requests to spool entries, shared by both;
- :mod:`.listen`: listen addresses, Host names and options (no spool, no HTTP).
"""
