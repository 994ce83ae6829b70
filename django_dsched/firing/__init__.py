"""The fire path: claim due schedules, plan them, and fire them in one fenced transaction.

- :mod:`.batch`: ``fire_batch``, the leader's hot loop: claim, plan and write one batch.
- :mod:`.claim`: the claim statement (on-time work before the backlog), its filters and
  parameters.
- :mod:`.plan`: ``plan``, each claimed row's slot, next run and state; why a row is set aside.
- :mod:`.fence`: ``Fence``, who may fire, and the fence every write checks.
- :mod:`.write`: ``WRITE`` and ``SET_ASIDE``, and the writer that narrows refused rows down.
- :mod:`.next_due`: ``next_due``, when to look again after a short claim.
- :mod:`.on_demand`: run now and backfills, given slots of one schedule (``fire_on_demand``).
- :mod:`.throttle`: each host's fire rate.
- :mod:`.overlap`: the overlap policies (what a slot does while the previous run goes):
  ``decide_overlap``, and ``OVERLAP`` / ``CANCEL_RUNS``; :mod:`.outlook`: what they will do
  to the next fires (the admin's preview).
"""
