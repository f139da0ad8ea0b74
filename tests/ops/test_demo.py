"""The demo a new user runs: both turns through a gateway and a sample agent."""

from __future__ import annotations

import subprocess
import sys


def test_demo_runs_both_turns_and_exits_zero() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "a2a_continue", "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "A2A-Task-State: input-required" in out
    assert "A2A-Task-State: completed" in out
    assert out.index('"task_created"') < out.index('"task_continued"')
    streamed = out[out.index("the same two turns, streamed") :]
    assert "stream event: artifact-update" in streamed
    assert "live event: task_continued" in streamed
    assert '"newState": "completed"' in streamed
    assert "demo succeeded" in out
