"""A real OpenAI-compatible chat server on 127.0.0.1 with scripted answers and injected faults; the process and
port checks of the tests that start real teacher servers."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest


class ScriptedChatServer:
    """Each request's `model` picks a behaviour; behaviours see the per-model call number (0-based).

    Behaviours: "ok"; "fail_500_then_ok:<k>" (500 for the first k calls); "fail_429_then_ok:<k>" (429 with
    Retry-After: 0); "always_500"; "http_401"; "malformed" (200 with a broken JSON body); "no_choices";
    "slow:<seconds>" (sleeps, then answers); "no_usage"; "hangup_then_ok:<k>" (the connection closed without a
    response for the first k calls, as a server process that died mid-request). The answer text is
    "<model> says <last user message>".
    """

    def __init__(self):
        self.calls = Counter()  # per model
        self.auth_headers = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.usage_tokens = 100
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                with server._lock:
                    n = server.calls[body["model"]]
                    server.calls[body["model"]] += 1
                    server.auth_headers.append(self.headers.get("Authorization"))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                behaviour, _, arg = body["model"].partition(":")
                if behaviour == "hangup_then_ok" and n < int(arg):  # the connection dropped, no response
                    with server._lock:
                        server.in_flight -= 1
                    self.close_connection = True
                    return
                try:
                    status, payload, headers = server.respond(body, n)
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)
                finally:
                    with server._lock:
                        server.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def respond(self, body, n):
        behaviour, _, arg = body["model"].partition(":")
        text = f"{body['model']} says {body['messages'][-1]['content']}"
        completion = {
            "id": f"c{n}",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": self.usage_tokens // 2,
                "completion_tokens": self.usage_tokens // 2,
                "total_tokens": self.usage_tokens,
            },
        }
        ok = (200, json.dumps(completion).encode(), {"Content-Type": "application/json"})
        if behaviour in ("ok", "hangup_then_ok"):  # the hang-ups are the handler's
            return ok
        if behaviour == "fail_500_then_ok":
            return (500, b'{"error": "boom"}', {}) if n < int(arg) else ok
        if behaviour == "fail_429_then_ok":
            return (429, b'{"error": "slow down"}', {"Retry-After": "0"}) if n < int(arg) else ok
        if behaviour == "always_500":
            return 500, b'{"error": "boom"}', {}
        if behaviour == "http_401":
            return 401, b'{"error": "bad key"}', {}
        if behaviour == "malformed":
            return 200, b'{"choices": [{"message": ', {"Content-Type": "application/json"}
        if behaviour == "no_choices":
            return 200, b'{"object": "chat.completion"}', {"Content-Type": "application/json"}
        if behaviour == "slow":
            time.sleep(float(arg))
            return ok
        if behaviour == "no_usage":
            del completion["usage"]
            return 200, json.dumps(completion).encode(), {}
        raise AssertionError(f"unknown behaviour {behaviour}")

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def chat_server():
    server = ScriptedChatServer()
    yield server
    server.close()


# -- processes and ports of real teacher servers ---------------------------------------------------------------------


def port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            found.add(c)
            todo.append(c)
    return found


def alive(pids) -> list[int]:
    """The pids that are still running (zombies are not)."""
    running = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            running.append(pid)
    return running
