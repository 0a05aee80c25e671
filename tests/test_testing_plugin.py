"""The user-facing pytest plugin (aiochronicle.testing), run as a user would through pytester."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

USER_TESTS = '''
import aiochronicle
from aiochronicle.testing import CHRONICLE_EPOCH_MILLIS


def test_dir_is_fresh(chronicle_queue_dir):
    assert not chronicle_queue_dir.exists()


def test_clock_is_fixed(chronicle_clock):
    assert isinstance(chronicle_clock, aiochronicle.SetTimeProvider)
    assert chronicle_clock.current_time_millis() == CHRONICLE_EPOCH_MILLIS


def test_round_trip_and_roll(chronicle_queue, chronicle_clock, chronicle_queue_dir):
    assert isinstance(chronicle_queue, aiochronicle.Queue)
    appender = chronicle_queue.appender()
    appender.append(b"day one")
    chronicle_clock.advance_millis(86_400_000)
    appender.append(b"day two")
    tailer = chronicle_queue.tailer()
    first, second = tailer.read_nowait(), tailer.read_nowait()
    assert first.payload == b"day one" and second.payload == b"day two"
    assert len(chronicle_queue.cycles()) == 2
    assert len(list(chronicle_queue_dir.glob("*.cq4"))) == 2


def test_queue_is_closed_after_the_test(chronicle_queue, request):
    request.config._chronicle_queue = chronicle_queue


def test_and_then_closed(request):
    assert request.config._chronicle_queue.closed
'''


def test_disabling_the_entry_point_removes_the_fixtures(pytester: pytest.Pytester) -> None:
    """The fixtures come from the ``pytest11`` entry point named ``aiochronicle``."""
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:aiochronicle",
                                           "-q")
    result.assert_outcomes(failed=1, errors=4)  # the last test needs the one before
    result.stdout.fnmatch_lines(["*fixture 'chronicle_*' not found*"])


def test_fixtures_through_the_entry_point(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=5)


def test_fixtures_through_pytest_plugins(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user='pytest_plugins = ["aiochronicle.testing"]\n' + USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:aiochronicle",
                                           "-q")
    result.assert_outcomes(passed=5)
