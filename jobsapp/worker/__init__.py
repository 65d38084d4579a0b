"""The worker process: what ``manage.py runworkers`` runs, and what no user imports.

One package for the consuming side, top to bottom (``pyproject.toml``'s worker layers contract
keeps the order; a module imports only the ones below it):

- ``launcher``: one worker process: builds, starts and stops its components, in the order its
  header documents; ``supervisor``: the ``-P N`` parent forking one such process per slot;
  ``heartbeat``: the process record Sidekiq's Web UI reads;
- ``manager``: the processor threads, the dispatcher and the acker of one process;
- ``dispatch``: one dispatcher per fetch mode: buffered (reliable fetch's fetcher thread) and
  per-thread (basic fetch);
- ``acker``: acknowledging finished jobs and counting them, in batches;
- ``processor``: running one job, and settling its fate through the door (``jobsapp.ending``);
- ``recovery``: a dead process's in-flight jobs back to their queues, poison to the dead set;
- ``retry``: what becomes of a job whose ``perform`` raised;
- ``fetch`` (with ``pop_connection``): taking jobs; ``scheduler``: due jobs into their queues;
- ``aio``: the async lane; ``timeouts``: the watchdog raising ``JobTimeout``.

The worker sits above the features it calls through the door (unique, batch, periodic, results,
limiter, expiry) and beside the operators' API (``jobsapp.api``), which never imports it. The
edges that run jobs in a worker (``jobsapp.celery``, ``jobsapp.django_tasks``, ``jobsapp.testing``)
and ``runworkers`` import it. Logger and thread names keep their short form (``jobsapp.processor``,
``jobsapp.processor-3``, ``jobsapp.acker``...): projects configure logging by those names.
"""
