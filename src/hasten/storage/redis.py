"""A Redis client as hasten's Redis stores hold one: short timeouts, one quick reconnect.

The exact cache's Redis L2 (``cache/redis_store.py``), the fleet's link (``fleet/link.py``)
and the semantic cache's shared tier build their clients alike: a call may cost at most its
socket timeout, and a dropped connection is retried once, at once.
"""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError


def redis_client(url: str, *, connect_timeout_s: float, op_timeout_s: float) -> Redis:
    """A client of ``url`` whose connects and calls give up after their timeouts.

    One immediate retry, on a dropped connection only: after a Redis restart every pooled
    connection is dead, and each would otherwise cost a failure of its own (seconds apart,
    as the pool hands them out). A timeout is not retried: a miss is cheaper than waiting
    twice on a struggling Redis.
    """
    return Redis.from_url(
        url,
        socket_connect_timeout=connect_timeout_s,
        socket_timeout=op_timeout_s,
        retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
    )
