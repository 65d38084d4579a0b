"""The engine's one database table: the transactional outbox (``jobsapp.outbox``).

An ``OutboxEntry`` is a push written in the project's own transaction, so it commits or rolls
back with the rows its job needs. At commit the push is made at once and the entry deleted; an
entry that outlives that (its process died after COMMIT, Redis was down) is pushed by the relay
(``jobsapp.worker.relay``). An entry the relay cannot push for a reason other than an outage (a
payload Redis refuses) is parked: ``parked_at`` and ``reason`` set, never tried again on its own.

No secondary index: the table is empty in the normal case (each entry lives from its INSERT to
its commit's DELETE), every index would cost each push one more write, and the relay reads it
in primary-key order.
"""

from __future__ import annotations

from django.db import models


class OutboxEntry(models.Model):
    """One deferred push: what to call at commit (``kind``, one of ``jobsapp.outbox``'s registered
    kinds) and its JSON ``arguments``; ``jid`` is the job's (the first one of a bulk push)."""

    id = models.BigAutoField(primary_key=True)
    kind = models.CharField(max_length=100)
    jid = models.CharField(max_length=64)
    arguments = models.TextField()
    created_at = models.FloatField(help_text="epoch seconds of the INSERT")
    attempts = models.PositiveIntegerField(default=0)
    parked_at = models.FloatField(null=True, blank=True, help_text="epoch seconds it was moved aside; null while it waits")
    reason = models.TextField(blank=True, default="")

    class Meta:
        db_table = "jobsapp_outbox"
        verbose_name = "outbox entry"
        verbose_name_plural = "outbox entries"

    def __str__(self) -> str:
        return f"{self.kind} {self.jid}"
