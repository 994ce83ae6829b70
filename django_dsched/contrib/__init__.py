"""Optional companions to django-dsched, each its own app or module."""
