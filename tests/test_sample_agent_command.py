"""``a2a-continue sample-agent``: the sample agent as a command, serving its card."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from a2a_continue.ops.sample_card import sample_card

CLI = (sys.executable, "-m", "a2a_continue", "sample-agent")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def sample_agent(*args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    with subprocess.Popen(
        (*CLI, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout is not None
            first = process.stdout.readline()
            assert "serving on" in first, process.stderr.read() if process.stderr else first
            yield process, first.rsplit(" ", 1)[1].strip()
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
    assert process.returncode == 0


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("application/json")
        return json.loads(answer.read())


def post_json(url: str, body: Any, version: str) -> Any:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "A2A-Version": version},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def test_sample_agent_serves_a_1_0_card_naming_its_json_rpc_endpoint() -> None:
    port = free_port()
    with sample_agent("--port", str(port)) as (_, endpoint):
        assert endpoint == f"http://127.0.0.1:{port}/"
        card = get_json(f"http://127.0.0.1:{port}/.well-known/agent-card.json")
        assert card["supportedInterfaces"][0] == {
            "url": endpoint,
            "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0",
        }
        assert card["capabilities"] == {"streaming": True, "pushNotifications": False}
        assert "url" not in card
        message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "weather?"}]}
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
        answer = post_json(card["supportedInterfaces"][0]["url"], rpc, "1.0")
        assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


def test_sample_agent_protocol_0_3_serves_a_0_3_card() -> None:
    port = free_port()
    with sample_agent("--port", str(port), "--protocol", "0.3") as (_, endpoint):
        card = get_json(f"http://127.0.0.1:{port}/.well-known/agent-card.json")
        assert card["url"] == endpoint
        assert card["preferredTransport"] == "JSONRPC"
        assert card["protocolVersion"] == "0.3.0"
        assert card["capabilities"]["streaming"] is True
        assert "supportedInterfaces" not in card
        message = {
            "kind": "message",
            "messageId": "m1",
            "role": "user",
            "parts": [{"kind": "text", "text": "weather?"}],
        }
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
        assert post_json(card["url"], rpc, "0.3")["result"]["status"]["state"] == "input-required"


def test_sample_agent_card_names_the_host_the_caller_used() -> None:
    port = free_port()
    with sample_agent("--port", str(port)):
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/.well-known/agent-card.json",
            headers={"Host": f"sample-agent:{port}"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            card = json.loads(answer.read())
    assert card["supportedInterfaces"][0]["url"] == f"http://sample-agent:{port}/"


def test_sample_agent_on_a_busy_port_says_so_in_one_line_and_exits_non_zero() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            (*CLI, "--port", str(port)), capture_output=True, text=True, timeout=60, check=False
        )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"sample agent: cannot listen on 127.0.0.1:{port}: {os.strerror(98)}"
    ]


def test_sample_agent_refuses_an_unknown_protocol() -> None:
    done = subprocess.run(
        (*CLI, "--protocol", "2.0"), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert "invalid choice" in done.stderr


@pytest.mark.parametrize("protocol", ["1.0", "0.3"])
def test_sample_card_advertises_streaming_and_no_push(protocol: str) -> None:
    card = sample_card("http://agent/", protocol)
    assert card["capabilities"] == {"streaming": True, "pushNotifications": False}
    assert card["skills"][0]["id"] == "forecast"


def test_sample_agent_slow_keeps_a_task_working_before_it_asks() -> None:
    port = free_port()
    with sample_agent("--port", str(port), "--slow", "0.5") as (process, endpoint):
        assert process.stdout is not None
        process.stdout.readline()  # its card
        assert "works for 0.5 s" in process.stdout.readline()
        message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "weather?"}]}
        params = {"message": message, "configuration": {"returnImmediately": True}}
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
        answer = post_json(endpoint, rpc, "1.0")
        assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"


def test_sample_agent_refuses_a_negative_slow() -> None:
    done = subprocess.run(
        (*CLI, "--slow", "-1"), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "sample agent: --slow must be seconds >= 0, not -1"
