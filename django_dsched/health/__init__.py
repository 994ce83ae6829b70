"""Per-schedule health: which schedules are unhealthy right now, since when and why.

Judged at read time against the database's clock from what the product already records
(docs/observability.md, "Schedule health"):

- :mod:`.judge`: the state of a schedule (OK, NEW, LATE, STUCK, FAILING, PAUSED, SET_ASIDE,
  ENDED) as one SQL expression, filters that read indexes, and the explanation of a state;
- :mod:`.counts`: the counts by state and topic, and the monitored schedules' own figures,
  for the metrics;
- :mod:`.slots`: a schedule's recent slots, scheduled against actual (the timeline);
- :mod:`.activity`: the cluster's fires, deliveries and backlog minute by minute;
- :mod:`.status`: where one schedule stands (``api.status``): state, health, fires and its
  newest message's run.
"""
