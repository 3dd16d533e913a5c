"""Gathering a validator's burst: the one-token requests a worker evaluates together.

A validator's K+1 requests reach the server a little apart (each is sent and parsed on its own), and
evaluating one apart from the rest costs a whole llama_decode. A burst the validator announces
(utils/burst.py: an id and a size on each request) is complete when all its requests are here. For
unannounced requests the worker guesses: it waits while requests that have arrived are still being
parsed, and for a short quiet gap after the latest arrival; a lone request waits at most what is
left of the gap after its own parsing. Either way never longer than BURST_MAX_SECONDS.
"""

from __future__ import annotations

import queue
import time

from utils.embedded.runtime.jobs import ARRIVALS, Job

BURST_GAP_SECONDS = 0.001
BURST_MAX_SECONDS = 0.040
BURST_POLL_SECONDS = 0.0002
BURST_LATE_SECONDS = 0.010  # how long an unannounced burst smaller than the last one waits for the rest
BURST_GROWING_GAP_SECONDS = 0.003  # the quiet gap for a burst already larger than the last one


def gather(jobs: queue.Queue[Job | None], burst: list[Job], expected: int) -> int:
    """Add to `burst` (which holds the first job) the rest of its burst from `jobs`; return the size
    to expect of the next unannounced burst (`expected`: that of the last one).

    Jobs of other bursts that arrive meanwhile are taken too: the worker groups them apart. A
    validator sends bursts of about the same size round after round, so while an unannounced burst
    has fewer jobs than the last one, a late request (a busy client, a busy machine) is waited for
    a little longer.
    """
    announced = burst[0].burst is not None
    if announced:  # a burst made in process is queued whole (ModelRunner.submit_all): taken at once
        burst += take_queued(jobs)
    started = time.monotonic()
    cap = started + BURST_MAX_SECONDS
    while not (announced and complete(burst)):
        try:
            more = jobs.get_nowait()
        except queue.Empty:
            now = time.monotonic()
            if announced:
                done = now >= cap
            else:  # a burst larger than the last one may still be growing: a longer gap
                gap = BURST_GROWING_GAP_SECONDS if len(burst) > max(expected, 1) else BURST_GAP_SECONDS
                quiet = ARRIVALS.in_flight <= 0 and now - ARRIVALS.last >= gap
                short = len(burst) < expected and now - started < BURST_LATE_SECONDS
                done = now >= cap or (quiet and not short)
            if done:
                break
            try:
                more = jobs.get(timeout=BURST_POLL_SECONDS)
            except queue.Empty:
                continue
        if more is None:  # the worker is asked to stop: leave that for it to see
            jobs.put(None)
            break
        burst.append(more)
    return expected if announced else len(burst)


def take_queued(jobs: queue.Queue[Job | None]) -> list[Job]:
    """The jobs queued now, under the queue's own lock (as its get() takes it), up to a request to
    stop (None), which stays queued for the worker to see."""
    taken: list[Job] = []
    with jobs.mutex:
        while jobs.queue and jobs.queue[0] is not None:
            taken.append(jobs.queue.popleft())
    return taken


def complete(jobs: list[Job]) -> bool:
    """Every burst announced among `jobs` has all its requests there."""
    counts: dict[tuple[str, int], int] = {}
    for job in jobs:
        if job.burst is not None:
            counts[job.burst] = counts.get(job.burst, 0) + 1
    return all(count >= size for (_, size), count in counts.items())
