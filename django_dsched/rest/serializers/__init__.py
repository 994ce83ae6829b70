"""What the REST API reads and writes. drf-spectacular names the OpenAPI components after
these classes: renaming one changes docs/openapi.yaml.

- ``fields``: the field types, strict about JSON types and time zones; ``StrictSerializer``
- ``schedule_input``: a schedule's definition as sent (create, PUT, PATCH); the API's names
- ``schedule_output``: a schedule as answered, alone or in a list; where it stands (status)
- ``queries``: what the reads take in their query strings
- ``actions``: pause, resume, run now, backfill, preview and dry run: input and answers
- ``bulk``: the bulk create's and the bulk cancel's bodies and answers
- ``events``: a schedule's events (fires and changes)
- ``messages``: outbox messages and the phases of their latest attempt
- ``cluster``: the leader, the instances and the backlog
- ``errors``: the one error shape (for the schema)
"""
