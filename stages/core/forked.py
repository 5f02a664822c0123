"""A generator run in a forked process, its items read here in order: one stage's two independent
halves on two cores (harvest_pushshift judges the comments there while it judges the posts here).

The process is forked, not spawned: the stage's modules are loaded already, so it starts in
milliseconds. Fork it before the stage opens writers or starts threads. The generator is called
with `receive`, which returns what this side `send`s (None, when not waiting, if nothing came
yet): what the other half found (harvest_pushshift sends the kept posts). Items travel pickled
through a bounded queue: the process runs at most `read_ahead` items ahead of the reader, so memory
stays bounded whatever the input size. Nothing is lost silently:
- an exception in the generator ends the reading with a RuntimeError carrying its traceback;
- a process that dies without finishing (killed, out of memory) is a StageError naming its exit code;
- a process whose parent dies (kill -9 of the stage) exits instead of waiting forever.
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import sys
import traceback
from typing import Any, Callable, Iterator

from .errors import StageError

_DONE = "forked:done"
_FAILED = "forked:failed"
POLL_SECONDS = 1.0  # how often a waiting side looks whether the other is still there


class ForkedGenerator:
    """Items of `produce(receive)` (never None), computed in a child process; `items()` reads
    them, waiting for each."""

    def __init__(self, produce: Callable[[Callable[[bool], Any]], Iterator], read_ahead: int, name: str):
        context = multiprocessing.get_context("fork")
        self.name = name
        self.queue = context.Queue(maxsize=read_ahead)
        self.inbox = context.Queue()
        self.finished = False
        sys.stdout.flush()  # the child would write out a copy of anything still buffered
        sys.stderr.flush()
        self.process = context.Process(target=self._run, args=(produce, os.getpid()), daemon=True, name=name)
        self.process.start()

    # the child's side ---------------------------------------------------------------------
    def _run(self, produce: Callable, parent: int) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops this process

        def orphaned() -> None:
            if os.getppid() != parent:  # the stage was killed: nobody will read or send any more
                os._exit(1)

        def put(item) -> None:
            while True:
                try:
                    self.queue.put(item, timeout=POLL_SECONDS)
                    return
                except queue.Full:
                    orphaned()

        def receive(block: bool):
            while True:
                try:
                    return self.inbox.get(timeout=POLL_SECONDS) if block else self.inbox.get_nowait()
                except queue.Empty:
                    if not block:
                        return None
                    orphaned()

        try:
            for item in produce(receive):
                put(item)
        except Exception:
            put((_FAILED, traceback.format_exc()))
        else:
            put((_DONE,))
        self.queue.close()
        self.queue.join_thread()  # every item is in the pipe before the process ends

    # this side ----------------------------------------------------------------------------
    def send(self, message: Any) -> None:
        """Hand `message` to the generator (its next `receive`)."""
        self.inbox.put(message)

    def items(self) -> Iterator:
        """Every item still to come, waiting for each."""
        while not self.finished:
            try:
                item = self.queue.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if self.process.is_alive():
                    continue
                try:  # what it sent just before it ended may still be on its way
                    item = self.queue.get(timeout=POLL_SECONDS)
                except queue.Empty:
                    raise StageError(f"{self.name}: the process ended without finishing (exit code {self.process.exitcode})") from None
            if type(item) is tuple and item and item[0] == _DONE:
                self.finished = True
            elif type(item) is tuple and item and item[0] == _FAILED:
                self.finished = True
                raise RuntimeError(f"{self.name} failed:\n{item[1]}")
            else:
                yield item

    def close(self) -> None:
        """Let a finished process end, stop one that still runs (the reader gave up early), and
        release the queues."""
        if self.finished:
            self.process.join(timeout=10 * POLL_SECONDS)
        if self.process.is_alive():
            self.process.terminate()
        self.process.join()
        for channel in (self.queue, self.inbox):
            channel.close()
            channel.cancel_join_thread()
