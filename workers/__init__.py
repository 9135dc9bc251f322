"""The distributed service: a Celery app whose workers run the same pipeline units as the CLI.

``celery -A npuprof.workers.app worker`` (or ``npuprof worker``) starts a worker; ``npuprof submit``
sends a sweep. Broker and result backend: Redis, ``NPUPROF_BROKER_URL``.
"""
