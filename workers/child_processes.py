"""Processes that work for this one: spawned, never forked, and ended with it.

`repartition` moves old partitions in processes (workers/commands/repartition_move.py), and the
worker splits a large restore over processes (workers/stream/restore_processes.py): Python is
left for each record, and threads share one core under the GIL. Both need the same two things
of a child: it starts clean (spawned: the parent's client threads and event loops are never
forked), and it dies with its parent (a kill -9 of the parent leaves nothing behind that could
still write).
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor


def pool(processes: int) -> ProcessPoolExecutor:
    """A pool of at most `processes` spawned children, each ending with this process."""
    return ProcessPoolExecutor(max_workers=max(1, processes),
                               mp_context=multiprocessing.get_context("spawn"),
                               initializer=die_with, initargs=(os.getpid(),))


def die_with(parent: int) -> None:
    """In a child: end with `parent` (Linux's PR_SET_PDEATHSIG, sent when the thread that
    started the child ends; elsewhere a child outlives a killed parent). Ctrl-C is the
    parent's to handle: it ends its children. A child's failure goes back to the parent as its
    reason, so the clients' own logs in the child are noise."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent ended before prctl: nobody to work for
        os._exit(1)
