"""Importers: schedules from other schedulers' tables (the ``dsched import-...`` commands)."""
