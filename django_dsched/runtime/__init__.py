"""Process plumbing shared by the long-running commands (``run_scheduler``, ``run_relay``).

- :mod:`.loops`: ``DatabaseLoop``, a loop's session set-up, LISTEN, backoff and stop.
- :mod:`.wakeup`: ``Waker``, the self-pipe and database socket a loop sleeps on.
- :mod:`.health`: ``HealthServer``, ``/livez`` and ``/readyz`` of a process's loops.
- :mod:`.http`: ``EndpointServer``, the endpoints' one-thread HTTP server (each connection
  bounded in time, their number capped, the oldest idle dropped past the cap).
- :mod:`.split_brain`: ``HostWatch``, two hosts of a multi-host URL accepting writes, seen.
- :mod:`.one_server`: ``ServerPin``, a loop's threads' sessions kept on the loop's server.
- :mod:`.clock`: ``database_now()``, the only "now" outside SQL.
- :mod:`.refusals`: ``refused(exc)``, a database error that is one row's fault, and
  ``refusal(exc)``, that error in words.
- :mod:`.binding`: cursors that bind parameters on the server, in binary (bulk statements).
- :mod:`.arrays`: the array literals bulk statements take their per-row values in.
- :mod:`.logs`: ``get_logger`` (every argument escaped) and the JSON formatter;
  :mod:`.text`: control characters, found and escaped.

Nothing here imports the models: the models use :mod:`.clock` and :mod:`.text`.
"""
