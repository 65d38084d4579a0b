"""The operators' dashboard: Django views over ``jobsapp.api``, mounted under ``/jobs/``.

``access`` guards every view (staff only, Redis down -> 503), ``pages`` renders the GET pages,
``actions`` handles the POST forms, ``metrics`` serves Prometheus text. Views never touch Redis
directly: everything goes through ``jobsapp.api``, so the dashboard, the CLI and users' scripts
see and do the same things.
"""
