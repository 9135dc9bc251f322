"""Celery app and tasks of the distributed service (design.md §3). Not built yet: see issue 5."""
