from __future__ import annotations

import factory

from django_dsched.enums import FrequencyUnit, ScheduleState
from django_dsched.models import Schedule


class ScheduleFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Schedule

    schedule_name = factory.Sequence(lambda n: f"schedule-{n}")
    frequency_unit = FrequencyUnit.MINUTES
    frequency_time = 1
    event_topic = "reports"
    event_type = "report.build"
    event_data = factory.LazyFunction(lambda: {"format": "pdf"})

    class Params:
        paused = factory.Trait(state=ScheduleState.PAUSED)
        cancelled = factory.Trait(state=ScheduleState.CANCELLED)
