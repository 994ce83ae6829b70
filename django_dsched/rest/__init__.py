"""The REST API (``pip install django-dsched[api]``): Django REST framework views over the
same services as the admin and the Python API, with an OpenAPI schema (drf-spectacular).

Mount it with one URLconf: ``path("api/dsched/", include("django_dsched.rest.urls"))``.
See docs/api.md.
"""
