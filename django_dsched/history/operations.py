"""The migration operation that creates ``event_store_t`` and ``outbox_message_t``
partitioned by id (:mod:`.partitions`)."""

from __future__ import annotations

from typing import Any

from django.db import migrations


class CreatePartitionedModel(migrations.CreateModel):
    """``CreateModel`` whose table is ``PARTITION BY RANGE (id)``.

    Django's own ``CREATE TABLE`` with the partitioning clause added; the model's indexes
    become partitioned indexes (each partition gets its own), and its primary key (the id,
    the partition key) stays a real unique constraint. The model state is ``CreateModel``'s,
    so ``makemigrations`` sees the same models.
    """

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        model = to_state.apps.get_model(app_label, self.name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        sql, params = schema_editor.table_sql(model)
        schema_editor.execute(f"{sql} PARTITION BY RANGE (id)", params or None)
        schema_editor.deferred_sql.extend(schema_editor._model_indexes_sql(model))

    def describe(self) -> str:
        return f"Create model {self.name} (partitioned by id)"
