"""A module no job payload may ever cause to be imported (scenario 6 and the security tests).

Importing it leaves a mark in the ledger Redis; the tests name it in hostile payloads
(``"tests.faults.sentinel.Boom"``) and then prove the mark is absent.
"""

from __future__ import annotations

import os

import redis

MARK = "ledger:sentinel-imported"

if os.environ.get("LEDGER_REDIS_URL"):
    redis.Redis.from_url(os.environ["LEDGER_REDIS_URL"]).set(MARK, os.getpid())


class Boom:
    def perform(self, *args: object) -> None:
        raise SystemExit("a payload made the worker run code it was never registered to run")
