"""What the REST API reads and writes.

- ``schedule_input``: all of it for now (the old ``rest/serializers.py``); split by idea next.
"""
