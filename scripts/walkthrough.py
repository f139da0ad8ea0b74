"""Play the README's "A walk through with curl" step by step and check every shown answer.

Run from a clone (after `make install`; CI runs it after `make test`): it reads the walkthrough
block of README.md, starts the servers it names in the background on free ports with a data
dir of its own, runs every other command with bash exactly as written (ports and the data dir
swapped for its own), and compares each output with the `# →` lines under it:

- `# → 201, A2A-Task-State: completed, {…}`: the status and headers of a `curl -si` answer;
- a JSON pattern: every member shown must be in the answer (`…` stands for anything else,
  `"…"` for any value; list items in the order shown);
- for a server, each `# →` line must appear in what it prints.

Exit 0 when every step gave its answer; else 1, naming the step and what came instead.

Against servers already running (the compose stacks' smoke tests): WALK_GATEWAY_PORT and
WALK_AGENT_PORT (on 127.0.0.1) stand for the README's ports, the server steps are skipped,
WALK_DATA_DIR holds the admin-token file and WALK_JWT_SECRET is the gateway's secret (for
the `token` steps).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## A walk through with curl"
HOME_DATA_DIR = "~/.local/share/a2a-continue"
README_PORTS = {"agent": 9999, "gateway": 8080}
STEP_TIMEOUT_S = 60.0
SERVER_TIMEOUT_S = 180.0
ANY = "\u0000any"


@dataclass
class Step:
    """One command of the walkthrough and the answers shown under it."""

    command: str
    expected: list[str] = field(default_factory=list)
    line: int = 0

    @property
    def is_server(self) -> bool:
        return self.command == "make run" or " sample-agent" in self.command

    @property
    def assigns(self) -> str | None:
        match = re.fullmatch(r"([A-Z][A-Z0-9_]*)=(.*)", self.command, flags=re.S)
        return match.group(1) if match else None


def walkthrough_block(readme: str) -> tuple[str, int]:
    """The first sh block after the walkthrough heading, and the line it starts on."""
    start = readme.index(SECTION)
    opening = readme.index("```sh\n", start) + len("```sh\n")
    closing = readme.index("```", opening)
    return readme[opening:closing], readme[:opening].count("\n") + 1


def complete(command: str) -> bool:
    """A command ends at a newline outside quotes that no backslash continues."""
    return command.count("'") % 2 == 0 and not command.endswith("\\")


def parse_steps(block: str, first_line: int) -> tuple[list[Step], list[str]]:
    """The steps of the block, and the shell functions it defines."""
    steps: list[Step] = []
    functions: list[str] = []
    pending = ""
    for number, raw in enumerate(block.splitlines(), start=first_line):
        line = raw.rstrip()
        if pending:
            pending += "\n" + line
        elif line.startswith("# →"):
            steps[-1].expected.append(line.removeprefix("# →").strip())
            continue
        elif not line.strip() or line.lstrip().startswith("#"):
            continue
        else:
            pending, start = line, number
        if complete(pending):
            if re.match(r"[a-z_]+\(\) \{", pending):
                functions.append(pending)
            else:
                steps.append(Step(pending, line=start))
            pending = ""
    return steps, functions


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Walk:
    """The state of one run: ports, data dir, variables, servers."""

    def __init__(self, data_dir: Path) -> None:
        self.ports = {name: free_port() for name in README_PORTS}
        # Servers already running (see the module's docstring): their ports, no start.
        self.running = bool(os.environ.get("WALK_GATEWAY_PORT"))
        if self.running:
            self.ports = {
                "gateway": int(os.environ["WALK_GATEWAY_PORT"]),
                "agent": int(os.environ["WALK_AGENT_PORT"]),
            }
        self.data_dir = data_dir
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("A2AC_")}
        self.env.update(
            A2AC_DATA_DIR=str(data_dir),
            A2AC_PORT=str(self.ports["gateway"]),
            PYTHONUNBUFFERED="1",
        )
        if self.running:
            self.env["A2AC_JWT_SECRET"] = os.environ["WALK_JWT_SECRET"]
        self.servers: list[subprocess.Popen[str]] = []
        self.functions = ""

    def localize(self, text: str) -> str:
        """Swap the README's ports and data dir for this run's."""
        for name, port in README_PORTS.items():
            text = text.replace(f":{port}", f":{self.ports[name]}")
            text = text.replace(f"--port {port}", f"--port {self.ports[name]}")
        return text.replace(HOME_DATA_DIR, str(self.data_dir))

    def bash(self, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", f"set -o pipefail\n{self.functions}\n{command}"],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT_S,
            check=False,
        )

    def start_server(self, step: Step) -> str | None:
        process = subprocess.Popen(
            ["bash", "-c", f"exec {self.localize(step.command)}"]
            if "&&" not in step.command
            else ["bash", "-c", self.localize(step.command)],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.servers.append(process)
        wanted = [self.localize(line) for line in step.expected]
        seen: list[str] = []
        deadline = time.monotonic() + SERVER_TIMEOUT_S
        assert process.stdout is not None
        while wanted and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                return "it exited before printing:\n  " + "\n  ".join(wanted) + _shown(seen)
            seen.append(line.rstrip())
            wanted = [w for w in wanted if w not in line]
        if wanted:
            return "it did not print in time:\n  " + "\n  ".join(wanted) + _shown(seen)
        # Keep reading what it prints, so a full pipe never stalls it.
        threading.Thread(target=_drain, args=(process.stdout,), daemon=True).start()
        return None

    def run(self, step: Step) -> str | None:
        """Run one step; return what is wrong, or None."""
        if step.is_server:
            return None if self.running else self.start_server(step)
        command = self.localize(step.command)
        name = step.assigns
        if name is not None:
            done = self.bash(f'{command}\nprintf %s "${name}"')
            if done.returncode != 0 or not done.stdout:
                return f"exit {done.returncode}, value {done.stdout!r}\n{done.stderr}"
            self.env[name] = done.stdout
            return None
        done = self.bash(command)
        if done.returncode != 0:
            return f"exit {done.returncode}\n{done.stdout}{done.stderr}"
        for expected in step.expected:
            problem = check_answer(done.stdout, self.localize(expected))
            if problem:
                return f"{problem}\nexpected: {expected}\ngot:\n{done.stdout}"
        return None

    def stop(self) -> None:
        for process in self.servers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.servers:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _drain(stream: IO[str]) -> None:
    with contextlib.suppress(ValueError, OSError):
        for _ in stream:
            pass


def _shown(lines: list[str]) -> str:
    return "\nit printed:\n  " + "\n  ".join(lines[-20:]) if lines else ""


def split_http(output: str) -> tuple[int | None, dict[str, str], str]:
    """Status, headers and body of `curl -i` output (or None, {}, output for `curl -s`)."""
    if not output.startswith("HTTP/"):
        return None, {}, output
    head, _, body = output.replace("\r\n", "\n").partition("\n\n")
    status_line, *lines = head.split("\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


def pattern_of(text: str) -> Any:
    """A shown JSON answer as a pattern: `"…"` any value, `…` any further members or items."""
    text = text.replace('"…"', json.dumps(ANY))
    text = re.sub(r"\{\s*…\s*\}", "{}", text)
    text = re.sub(r"\[\s*…\s*\]", "[]", text)
    text = re.sub(r",\s*…", "", text)
    text = re.sub(r"…\s*,", "", text)
    return json.loads(text)


def matches(pattern: Any, actual: Any) -> bool:
    if pattern == ANY:
        return True
    if isinstance(pattern, dict):
        return isinstance(actual, dict) and all(
            key in actual and matches(value, actual[key]) for key, value in pattern.items()
        )
    if isinstance(pattern, list):
        if not isinstance(actual, list):
            return False
        items = iter(actual)
        return all(any(matches(want, item) for item in items) for want in pattern)
    return bool(pattern == actual and type(pattern) is type(actual))


def check_answer(output: str, expected: str) -> str | None:
    """Say how ``output`` differs from the answer shown, or None."""
    status, headers, body = split_http(output)
    prefix, brace, shown = expected.partition("{")
    for part in filter(None, (p.strip() for p in prefix.split(","))):
        if part.isdigit():
            if status != int(part):
                return f"status {status}, not {part}"
            continue
        name, _, value = part.partition(":")
        if headers.get(name.strip().lower()) != value.strip():
            return f"header {name.strip()}: {headers.get(name.strip().lower())!r}, not {value!r}"
    if not brace:
        return None
    try:
        actual = json.loads(body)
    except json.JSONDecodeError:
        return "the answer is not JSON"
    if not matches(pattern_of(brace + shown), actual):
        return "the answer does not match"
    return None


def main() -> int:
    block, first_line = walkthrough_block((ROOT / "README.md").read_text())
    steps, functions = parse_steps(block, first_line)
    if not steps or not any(step.expected for step in steps):
        print("walkthrough: no steps with answers found in README.md", file=sys.stderr)
        return 1
    given = os.environ.get("WALK_DATA_DIR")
    data_dir = Path(given) if given else Path(tempfile.mkdtemp(prefix="a2ac-walkthrough-"))
    walk = Walk(data_dir)
    walk.functions = "\n".join(functions)
    failed = False
    try:
        for number, step in enumerate(steps, start=1):
            first = step.command.splitlines()[0]
            problem = walk.run(step)
            status = "ok  " if problem is None else "FAIL"
            print(f"{status} {number:2} README.md:{step.line}  {first[:88]}", flush=True)
            if problem is not None:
                print("     " + problem.replace("\n", "\n     "), flush=True)
                failed = True
                break
    finally:
        walk.stop()
        if not given:
            shutil.rmtree(data_dir, ignore_errors=True)
    print("walkthrough: " + ("FAILED" if failed else f"all {len(steps)} steps gave their answers"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
