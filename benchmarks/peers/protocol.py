"""The runner's data file and the JSON-line protocol between the runner and its workers.

Standard library only: the DyNet worker imports it from another interpreter. The
data file is `{"treelstm": {"trees": [...], "labels": [...]}, "bilstm":
{"sentences": [{"words": [...], "tags": [...]}, ...]}, "chartagger": {"sentences":
[...], "vocabulary": n}}`, a tree being a word id or a list `[left, right]`, a
chartagger word `{"word": id}` or `{"word": 0, "chars": [ids]}`. A worker answers a
first line `{"ready": true, ...}`, then one line per request `{"op": "train"|"infer",
"workload": ..., "batch": B, "items": n}`: `{"seconds": s, "loss": ...}` or
`{"error": message}`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback


def save_data(path: str, data: dict) -> None:
    with open(path, "w") as f:
        json.dump(data, f)


def _as_tuples(tree):
    return (_as_tuples(tree[0]), _as_tuples(tree[1])) if isinstance(tree, list) else tree


def load_data(path: str, tuples: bool = False) -> dict:
    """The data file; with `tuples`, trees as nested tuples (Refold's tree inputs)."""
    with open(path) as f:
        data = json.load(f)
    if tuples and "treelstm" in data:
        data["treelstm"]["trees"] = [_as_tuples(t) for t in data["treelstm"]["trees"]]
    return data


def claim_stdout():
    """The protocol's output stream; fd 1 goes to stderr, so that libraries printing
    to stdout cannot corrupt the replies."""
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return reply


def serve(handler, reply, hello: dict) -> None:
    """Answers requests from stdin with `handler(request)` until EOF or `{"op": "quit"}`."""
    reply.write(json.dumps({"ready": True, **hello}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("op") == "quit":
            break
        try:
            answer = handler(request)
        except Exception as e:  # reported to the runner, which stops
            traceback.print_exc()
            answer = {"error": f"{type(e).__name__}: {e}"}
        reply.write(json.dumps(answer) + "\n")


class Worker:
    """A worker process started from `command` (with `env` added to this process's
    environment); `run(request)` returns its answer."""

    def __init__(self, name: str, command: list, env: dict | None = None):
        self.name = name
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, bufsize=1,
                                        env=None if env is None else {**os.environ, **env})
        self.hello = self._read()

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait()
            raise RuntimeError(f"{self.name} worker exited (code {code}) without answering; "
                               f"see its messages above")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"{self.name} worker: {answer['error']}")
        return answer

    def run(self, request: dict) -> dict:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.process.stdin.close()
                self.process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
