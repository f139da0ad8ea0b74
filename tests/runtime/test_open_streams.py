"""The streams of one process: the cap, and full collections that skip long-lived streams."""

from __future__ import annotations

import gc
import weakref

import pytest

from a2a_continue.runtime.open_streams import FREEZE_EVERY, OpenStreams, TooManyStreams


class Node:
    """Something a stream holds, in a reference cycle (as frames and futures often are)."""

    def __init__(self) -> None:
        self.me = self


def test_streams_over_the_limit_are_refused_until_one_is_released() -> None:
    streams = OpenStreams(2)
    first, _second = streams.take(), streams.take()
    with pytest.raises(TooManyStreams):
        streams.take()
    first.release()
    first.release()  # once only
    assert streams.open == 1
    streams.take()


def test_what_open_streams_hold_is_left_out_of_full_collections_and_reclaimed_after() -> None:
    streams = OpenStreams(10 * FREEZE_EVERY)
    held = Node()
    gone = weakref.ref(held)
    try:
        opened = [streams.take() for _ in range(FREEZE_EVERY)]
        # Long-lived by now: no collection walks it any more.
        assert not any(o is held for o in gc.get_objects())
        del held
        gc.collect()
        # Garbage among frozen objects waits...
        assert gone() is not None
        for stream in opened:
            stream.release()
        # ...until few streams remain open.
        assert gone() is None
    finally:
        gc.unfreeze()
