"""``celery.contrib.testing``: a worker inside the test process (``worker.start_worker``)."""
