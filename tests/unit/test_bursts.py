"""How the embedded server's worker gathers a validator burst (utils/embedded/runtime/bursts.py), without a model."""

from __future__ import annotations

import queue

import pytest

from utils import burst
from utils.embedded.runtime import bursts
from utils.embedded.runtime.jobs import Job
from utils.sampling import SamplingOptions


def job(announced: tuple[str, int] | None = None) -> Job:
    return Job(b"p", SamplingOptions(temperature=0.0), 1, None, on_token=print, on_done=print, burst=announced)


class Clock:
    """Simulated time for `gather`: it passes only while gather waits on its queue, so a late arrival
    is late by exactly what the test says, however busy the machine is."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


class ArrivingJobs(queue.Queue):
    """A queue whose jobs arrive at given simulated times: a wait on it (`get` with a timeout) lets
    that timeout pass on the clock, then hands over a job that has arrived by then, if any."""

    def __init__(self, clock: Clock, arrivals: list[tuple[float, Job]] = ()):
        super().__init__()
        self.clock, self.arrivals = clock, sorted(arrivals, key=lambda arrival: arrival[0])
        self.waits = 0

    def get(self, block: bool = True, timeout: float | None = None) -> Job | None:
        if block and timeout:
            self.waits += 1
            self.clock.now += timeout
        while self.arrivals and self.arrivals[0][0] <= self.clock.now:
            self.put(self.arrivals.pop(0)[1])
        return super().get(block=False)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    simulated = Clock()
    monkeypatch.setattr(bursts, "time", simulated)  # gather reads time.monotonic() only
    return simulated


def test_an_announced_burst_waits_for_its_late_requests(clock: Clock):
    """A slow arrival (twice the wait an unannounced burst gets, within the cap) still joins its burst,
    and the wait ends when it is complete."""
    late = 2 * bursts.BURST_LATE_SECONDS
    assert late < bursts.BURST_MAX_SECONDS
    jobs = ArrivingJobs(clock, [(late, job(("a", 3))), (late, job(("a", 3)))])
    gathered = [job(("a", 3))]
    bursts.gather(jobs, gathered, expected=1)
    assert len(gathered) == 3
    assert late <= clock.now < late + 2 * bursts.BURST_POLL_SECONDS


def test_an_announced_burst_stops_waiting_once_complete(clock: Clock):
    jobs = ArrivingJobs(clock)
    for _ in range(4):
        jobs.put(job(("b", 5)))
    gathered = [job(("b", 5))]
    bursts.gather(jobs, gathered, expected=9)  # a larger last burst does not make it wait
    assert len(gathered) == 5 and jobs.waits == 0 and clock.now == 0


def test_a_burst_missing_a_request_waits_no_longer_than_the_cap(clock: Clock):
    jobs = ArrivingJobs(clock, [(2 * bursts.BURST_MAX_SECONDS, job(("c", 2)))])  # too late
    gathered = [job(("c", 2))]
    bursts.gather(jobs, gathered, expected=1)
    assert len(gathered) == 1
    assert bursts.BURST_MAX_SECONDS <= clock.now < bursts.BURST_MAX_SECONDS + 2 * bursts.BURST_POLL_SECONDS


def test_the_stop_signal_is_left_for_the_worker():
    jobs: queue.Queue = queue.Queue()
    jobs.put(None)
    gathered = [job(("d", 2))]
    bursts.gather(jobs, gathered, expected=1)
    assert gathered == gathered[:1] and jobs.get_nowait() is None


def test_a_burst_queued_whole_is_taken_at_once_up_to_a_stop_which_stays():
    """An in-process burst is queued whole (ModelRunner.submit_all): its jobs are taken under one lock,
    with no wait, and a request to stop queued after them is left for the worker."""
    announced = ("e", 3)
    rest, later = [job(announced), job(announced)], job(("f", 1))
    jobs: queue.Queue = queue.Queue()
    for each in (*rest, None, later):
        jobs.put(each)
    gathered = [job(announced)]
    bursts.gather(jobs, gathered, expected=1)
    assert gathered[1:] == rest and jobs.get_nowait() is None and jobs.get_nowait() is later


def test_header_round_trip_and_malformed_values():
    header = burst.announce(4)
    burst_id, size = burst.parse(header[burst.HEADER])
    assert size == 4 and burst.parse(burst.announce(4)[burst.HEADER])[0] != burst_id
    for bad in (None, "", "x", "x y", "x 0", "x 65", " 3"):
        assert burst.parse(bad) is None, bad
