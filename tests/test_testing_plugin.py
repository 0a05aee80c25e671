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


def test_without_opting_in_there_are_no_fixtures(pytester: pytest.Pytester) -> None:
    """The plugin is opt-in: installing aiochronicle registers no ``pytest11`` entry point."""
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(failed=1, errors=4)  # the last test needs the one before
    result.stdout.fnmatch_lines(["*fixture 'chronicle_*' not found*"])


def test_fixtures_through_dash_p(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p",
                                           "aiochronicle.testing", "-q")
    result.assert_outcomes(passed=5)


def test_fixtures_through_pytest_plugins(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user='pytest_plugins = ["aiochronicle.testing"]\n' + USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=5)


def test_an_unrelated_session_does_not_import_aiochronicle(pytester: pytest.Pytester) -> None:
    """Another project's test run, in an environment where aiochronicle is installed
    (scripts/test_installed.py runs this against the wheel), loads none of it: its
    conftest looks at ``sys.modules`` when the session ends."""
    pytester.makeconftest("""
        import sys

        def pytest_sessionfinish(session):
            loaded = sorted(m for m in sys.modules if m.split(".")[0] == "aiochronicle")
            print("AIOCHRONICLE_MODULES", loaded)
    """)
    pytester.makepyfile(test_other="def test_nothing_to_do_with_queues():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", "-q")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*AIOCHRONICLE_MODULES []*"])
    # and the check sees a session that does load it
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p",
                                           "aiochronicle.testing", "-s", "-q")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*AIOCHRONICLE_MODULES *'aiochronicle.testing'*"])


FACTORY_TESTS = '''
import pytest
import aiochronicle
from aiochronicle.testing import CHRONICLE_EPOCH_MILLIS, QueueFactory

OPENED = []


def test_two_queues_with_their_own_options(chronicle_queue_factory: QueueFactory,
                                           chronicle_clock, tmp_path):
    inbound = chronicle_queue_factory("in", source_id=7)
    outbound = chronicle_queue_factory("out", roll_cycle=aiochronicle.RollCycles.FAST_HOURLY)
    OPENED.extend([inbound, outbound])
    assert inbound.path == str(tmp_path / "in") and outbound.path == str(tmp_path / "out")
    assert inbound.source_id == 7
    assert outbound.roll_cycle is aiochronicle.RollCycles.FAST_HOURLY
    assert inbound.time_provider is chronicle_clock is outbound.time_provider
    index = inbound.appender().append(b"order")
    assert inbound.roll_cycle.to_cycle(index) == CHRONICLE_EPOCH_MILLIS // 86_400_000
    # the same name twice: two handles on one queue
    again = chronicle_queue_factory("in")
    OPENED.append(again)
    assert again.tailer().read_nowait().payload == b"order"


def test_an_own_clock_and_bad_names(chronicle_queue_factory):
    clock = aiochronicle.SetTimeProvider(0)
    q = chronicle_queue_factory("epoch", time_provider=clock)
    assert q.appender().append(b"x") == 0  # cycle 0, sequence 0
    for bad in ("", "/etc/q", "../q"):
        with pytest.raises(ValueError):
            chronicle_queue_factory(bad)


def test_all_closed_afterwards():
    assert len(OPENED) == 3 and all(q.closed for q in OPENED)
'''


def test_queue_factory(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_factory=FACTORY_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p",
                                           "aiochronicle.testing", "-q")
    result.assert_outcomes(passed=3)


def test_the_howto_example_passes(pytester: pytest.Pytester) -> None:
    """The example of docs/howto.md "Test your own services" is a passing test file."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "howto.md").read_text()
    section = page.split("## Test your own services", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    pytester.makepyfile(test_howto=code)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1)


def test_the_plugin_loads_nothing_native_until_a_fixture_is_used(
        pytester: pytest.Pytester) -> None:
    """``-p aiochronicle.testing`` in a session whose tests use none of its fixtures
    imports the plugin and the package's ``__init__``, not the native core."""
    pytester.makeconftest("""
        import sys

        def pytest_sessionfinish(session):
            loaded = sorted(m for m in sys.modules if m.split(".")[0] == "aiochronicle")
            print("AIOCHRONICLE_MODULES", loaded)
    """)
    pytester.makepyfile(test_other="def test_no_fixture():\n    assert 1 + 1 == 2\n"
                                   "def test_a_fixture(chronicle_clock):\n"
                                   "    assert chronicle_clock.current_time_millis() > 0\n")
    alone = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "aiochronicle.testing",
                                          "-s", "-q", "-k", "no_fixture")
    alone.assert_outcomes(passed=1, deselected=1)
    (line,) = [ln for ln in alone.stdout.lines if "AIOCHRONICLE_MODULES" in ln]
    assert line.endswith("AIOCHRONICLE_MODULES ['aiochronicle', 'aiochronicle._version',"
                         " 'aiochronicle.testing']"), line
    used = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "aiochronicle.testing",
                                         "-s", "-q")
    used.assert_outcomes(passed=2)
    used.stdout.fnmatch_lines(["*AIOCHRONICLE_MODULES *'aiochronicle._core._native'*"])
