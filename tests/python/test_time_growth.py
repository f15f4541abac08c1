"""How kilnd's `time` grows `number` (docs/protocol.md, `time`), through a real kilnd and a
real kernel on cpu:0: a kernel whose first run is fast and every later one slow (as a run
alone on a loaded CPU is fast and runs back to back are not). TVM's rule grew `number` from
the first run and made each repeat many times min_repeat_ms; kiln's grows at most 4x a step,
each step planned from the runs timed before it (a measurement of a quarter of min_repeat_ms
or more continued, a shorter one timed again).

The assertions read what kilnd reports (seconds per call of each repeat, `number`) and the
kernel's own run counter, never this test's clock."""

import numpy as np
import pytest

import kiln
from conftest import needs

# spin(ctr, sink, fast, slow, nfast): run c = ctr[0]++ spins `fast` iterations of a volatile
# add while c < nfast, `slow` iterations after. The tests make the warm-up run and the first
# timed one fast (a first run with no warm-up pays the worker's cold start and is slow).
SPIN = """
define void @spin(ptr %ctr, ptr %sink, i64 %fast, i64 %slow, i64 %nfast) section "kiln.kernel" {
entry:
  %c = load volatile i64, ptr %ctr, align 8
  %c1 = add i64 %c, 1
  store volatile i64 %c1, ptr %ctr, align 8
  %isfast = icmp ult i64 %c, %nfast
  %n = select i1 %isfast, i64 %fast, i64 %slow
  br label %loop

loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %v = load volatile i64, ptr %sink, align 8
  %v1 = add i64 %v, %i
  store volatile i64 %v1, ptr %sink, align 8
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, %n
  br i1 %more, label %loop, label %done

done:
  ret void
}
"""

FAST, SLOW = 4000, 400000  # 0.002 and 0.16 ms on this machine's cores, unloaded


@pytest.fixture
def spin(s):
    with needs("compile"):
        return s.compile(SPIN, target="cpu")


def counters(dev):
    return kiln.nd.array(np.zeros(1, np.int64), dev), kiln.nd.array(np.zeros(1, np.int64), dev)


def test_fast_first_run_keeps_repeats_near_min_repeat_ms(s, dev, spin):
    ctr, sink = counters(dev)
    f = spin["spin"]
    min_ms = 20
    # Three requests of one repeat each: with one repeat, seconds per call times `number` is
    # exactly what the repeat took (a later repeat that came in short could grow `number`
    # again, and `results` do not say which number each repeat ran with).
    repeats, notes = [], []
    for _ in range(3):
        ctr.copyfrom(np.zeros(1, np.int64))
        with needs("time"):
            r = f.time(ctr, sink, FAST, SLOW, 2, grid=1, block=1, device=dev, number=1, repeat=1,
                       min_repeat_ms=min_ms, warmup=1)
        number = int(r.raw["number"])
        runs = int(ctr.numpy()[0])
        ms = r.results[0] * 1e3 * number
        repeats.append(ms)
        notes.append("number %d: %.1f ms (%.3f ms a run), %d runs in all" % (number, ms, r.results[0] * 1e3, runs))
        assert runs >= number + 2, notes
        assert ms >= min_ms * 0.999, notes
        # TVM's rule: number = 20 ms / (fast run) + 1, about 100 times too many slow runs
        # (4 s a repeat for 20 ms here, 200x). kiln's: the repeat that reaches 20 ms has at
        # most 4x the runs of the measurement it was planned from, so it overshoots by 1.02x
        # times the change of a run's cost between the two, which preemption on this shared machine
        # makes large at times (measured under the whole suite at a load of 14: 124 to
        # 167 ms, runs of 2.4 to 41 ms where they take 0.16 alone).
        assert ms <= 25 * min_ms, notes
    # The median request: the bound a steady run rate gives (1.02x), with room for noise.
    assert sorted(repeats)[1] <= 10 * min_ms, notes


def test_growth_reaches_min_repeat_ms_from_a_slow_first_run(s, dev, spin):
    ctr, sink = counters(dev)
    # the reverse: only the first run slow (a cold start), later ones fast
    with needs("time"):
        r = spin["spin"].time(ctr, sink, SLOW, FAST, 1, grid=1, block=1, device=dev, number=1, repeat=2,
                              min_repeat_ms=10, warmup=0)
    number = int(r.raw["number"])
    for t in r.results:
        assert t * 1e3 * number >= 10 * 0.999, (number, r.results)
    assert number > 1


def test_given_number_is_kept_without_min_repeat_ms(s, dev, spin):
    ctr, sink = counters(dev)
    with needs("time"):
        r = spin["spin"].time(ctr, sink, FAST, FAST, 0, grid=1, block=1, device=dev, number=7, repeat=2, warmup=1)
    assert int(r.raw["number"]) == 7 and len(r.results) == 2
    assert int(ctr.numpy()[0]) == 1 + 2 * 7
