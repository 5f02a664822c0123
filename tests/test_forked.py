"""stages/core/forked.py: a generator run in a forked process, its items read in order; a fault in
it, its death and its parent's death each end cleanly (no hang, no silent loss)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import REPO
from stages.core.errors import StageError
from stages.core.forked import ForkedGenerator


def _numbers(n: int, receive=None):
    for i in range(n):
        yield ("number", i, os.getpid())


def test_items_arrive_in_order_from_another_process():
    reader = ForkedGenerator(lambda receive: _numbers(500), read_ahead=4, name="numbers")
    try:
        items = list(reader.items())
    finally:
        reader.close()
    assert [i for _, i, _ in items] == list(range(500))
    assert {pid for _, _, pid in items} == {reader.process.pid} != {os.getpid()}
    assert reader.finished and reader.process.exitcode == 0


def test_the_generator_receives_what_this_side_sends():
    def echo(receive):
        yield ("before", receive(False))  # nothing sent yet: no wait
        yield ("got", receive(True))

    reader = ForkedGenerator(echo, read_ahead=4, name="echo")
    try:
        items = reader.items()
        assert next(items) == ("before", None)
        reader.send({"kept": [1, 2]})
        assert next(items) == ("got", {"kept": [1, 2]})
        assert list(items) == [] and reader.finished
    finally:
        reader.close()


def test_a_fault_in_the_generator_is_raised_with_its_traceback():
    def faulty(receive):
        yield ("ok",)
        raise ValueError("bad record 7")

    reader = ForkedGenerator(faulty, read_ahead=4, name="faulty reader")
    try:
        items = reader.items()
        assert next(items) == ("ok",)
        with pytest.raises(RuntimeError, match=r"(?s)faulty reader failed:.*ValueError: bad record 7"):
            next(items)
    finally:
        reader.close()


def test_a_process_that_dies_is_a_clear_error_not_a_hang():
    def dies(receive):
        yield ("ok",)
        time.sleep(0.5)  # "ok" reaches the pipe; what a process has not sent when it dies is lost
        os.kill(os.getpid(), signal.SIGKILL)
        yield ("never",)

    reader = ForkedGenerator(dies, read_ahead=4, name="doomed reader")
    try:
        items = reader.items()
        assert next(items) == ("ok",)
        with pytest.raises(StageError, match=r"doomed reader: the process ended without finishing \(exit code -9\)"):
            next(items)
    finally:
        reader.close()


def test_close_stops_a_reader_nobody_reads():
    reader = ForkedGenerator(lambda receive: _numbers(10**9), read_ahead=2, name="endless")
    reader.close()
    assert not reader.process.is_alive()


@pytest.mark.parametrize("produce", ["(('n', i) for i in itertools.count())", "(('n', receive(True)) for _ in [0])"],
                         ids=["blocked_on_a_full_queue", "blocked_waiting_to_receive"])
def test_the_process_exits_when_its_parent_is_killed(tmp_path, produce):
    """kill -9 of the stage: the reader, blocked either way, notices and exits."""
    script = textwrap.dedent("""
        import itertools, os, signal, sys, time
        sys.path.insert(0, sys.argv[1])
        from stages.core.forked import ForkedGenerator
        reader = ForkedGenerator(lambda receive: PRODUCE, read_ahead=2, name="orphan")
        print(reader.process.pid, flush=True)
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    parent = subprocess.run([sys.executable, "-c", script.replace("PRODUCE", produce), str(REPO)], capture_output=True, text=True, timeout=60)
    assert parent.returncode == -signal.SIGKILL
    child = int(parent.stdout.split()[0])
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.2)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"  # a zombie has exited; only its entry waits for a reaper
    except FileNotFoundError:
        return False
