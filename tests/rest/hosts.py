"""A host resolver for the tenancy tests: each user reaches the hosts named in its username."""

from __future__ import annotations

import uuid

from rest_framework.request import Request

HOST_A = uuid.UUID("aaaaaaaa-0000-0000-0000-000000000000")
HOST_B = uuid.UUID("bbbbbbbb-0000-0000-0000-000000000000")
HOSTS = {"a": HOST_A, "b": HOST_B}


def by_username(request: Request) -> list[uuid.UUID]:
    """ "alice-a" reaches host A, "both-ab" A then B, "nobody-" none."""
    letters = request.user.get_username().rpartition("-")[2]
    return [HOSTS[letter] for letter in letters]
