"""How the embedded server's worker gathers a validator burst (utils/embedded/bursts.py), without a model."""

from __future__ import annotations

import queue
import threading
import time

from utils import burst
from utils.embedded import bursts
from utils.embedded.jobs import Job
from utils.sampling import SamplingOptions


def job(announced: tuple[str, int] | None = None) -> Job:
    return Job(b"p", SamplingOptions(temperature=0.0), 1, None, on_token=print, on_done=print, burst=announced)


def later(jobs: queue.Queue, items: list, delay: float) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(delay), [jobs.put(item) for item in items]))
    thread.start()
    return thread


def test_an_announced_burst_waits_for_its_late_requests():
    """A slow arrival (20 ms, twice the wait an unannounced burst gets) still joins its burst."""
    jobs: queue.Queue = queue.Queue()
    first = job(("a", 3))
    thread = later(jobs, [job(("a", 3)), job(("a", 3))], 0.020)
    gathered = [first]
    bursts.gather(jobs, gathered, expected=1)
    thread.join()
    assert len(gathered) == 3


def test_an_announced_burst_stops_waiting_once_complete():
    jobs: queue.Queue = queue.Queue()
    for _ in range(4):
        jobs.put(job(("b", 5)))
    gathered = [job(("b", 5))]
    started = time.monotonic()
    bursts.gather(jobs, gathered, expected=9)  # a larger last burst does not make it wait
    assert len(gathered) == 5 and time.monotonic() - started < bursts.BURST_LATE_SECONDS


def test_a_burst_missing_a_request_waits_no_longer_than_the_cap():
    jobs: queue.Queue = queue.Queue()
    gathered = [job(("c", 2))]
    started = time.monotonic()
    bursts.gather(jobs, gathered, expected=1)
    assert len(gathered) == 1 and bursts.BURST_MAX_SECONDS <= time.monotonic() - started < 1


def test_the_stop_signal_is_left_for_the_worker():
    jobs: queue.Queue = queue.Queue()
    jobs.put(None)
    gathered = [job(("d", 2))]
    bursts.gather(jobs, gathered, expected=1)
    assert gathered == gathered[:1] and jobs.get_nowait() is None


def test_header_round_trip_and_malformed_values():
    header = burst.announce(4)
    burst_id, size = burst.parse(header[burst.HEADER])
    assert size == 4 and burst.parse(burst.announce(4)[burst.HEADER])[0] != burst_id
    for bad in (None, "", "x", "x y", "x 0", "x 65", " 3"):
        assert burst.parse(bad) is None, bad
