"""The primitives whose sync and async forms differ, each under two names: the async
sources (``aio.py``, ...) use the ``A`` names, and ``scripts/async_to_sync.py`` maps them
to the sync ones in the modules it generates (after psycopg's ``_acompat.py``)."""

from __future__ import annotations

import asyncio
import threading
import time

#: the lock of a saver on one connection
ALock = asyncio.Lock
Lock = threading.Lock

#: what a waiter of ``_order.Turns`` waits on
AEvent = asyncio.Event
Event = threading.Event

#: ``open=`` of a pool the savers' ``from_conn_string`` enters at once: an
#: ``AsyncConnectionPool`` is opened by ``async with`` (opening it in the constructor is
#: deprecated), a ``ConnectionPool`` in its constructor, as the savers always did
APOOL_OPEN_AT_INIT = False
POOL_OPEN_AT_INIT = True

#: the wait between two tries of the migration lock
asleep = asyncio.sleep
sleep = time.sleep

#: what the routing saver adds to a saver method's name to call it (``aput``, ``put``)
AMETHOD_PREFIX = "a"
METHOD_PREFIX = ""
