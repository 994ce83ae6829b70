"""The cluster of schedulers: who may fire which schedules, and what the cluster looks like.

- :mod:`.lease`: the lease rows of ``scheduler_lock_t`` (one leader, or one owner per bucket),
  their epochs and heartbeats, taken and renewed on the database's clock.
- :mod:`.bucket_count`: the cluster's bucket count, stored on bucket 0's row and agreed at
  start-up.
- :mod:`.buckets`: which bucket a schedule is in, and who owns each (rendezvous hashing).
- :mod:`.presence`: each instance's row for the cluster page.
- :mod:`.status`: the cluster as the admin, REST and ``dsched cluster`` show it.
"""
