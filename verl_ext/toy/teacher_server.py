"""A local OpenAI-compatible chat endpoint that answers the toy copy-digit task: teachers for Composer's trace-replay
channel on CPU (the demo preset, the benchmark and the tests), with no model and no network.

POST /v1/chat/completions with {"model": ..., "messages": [...]}: model "right" answers the first digit of the last
user message in the toy task's format, model "wrong" always answers 10 (never a digit of the toy data), any other
model name gets a 404. `latency_s` delays every answer, like a remote teacher.

    python -m verl_ext.toy.teacher_server --port 8321 [--latency-s 0.5]
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from verl_ext.toy.task import answer_text

_DIGIT = re.compile(r"\d")


def toy_answer(model: str, messages: list[dict]) -> str | None:
    """The teacher's answer text, or None for an unknown model."""
    if model == "wrong":
        return answer_text(10)
    if model != "right":
        return None
    user = [m.get("content", "") for m in messages if m.get("role") == "user"]
    found = _DIGIT.search(user[-1] if user else "")
    return answer_text(int(found.group())) if found else "I do not know."


class ToyTeacherServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, latency_s: float = 0.0):
        latency = float(latency_s)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # one stderr line per request would flood the training log
                pass

            def do_POST(self):
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                    text = toy_answer(str(body.get("model")), list(body.get("messages") or []))
                except (ValueError, TypeError, AttributeError):
                    return self._send(400, {"error": {"message": "malformed request"}})
                if text is None:
                    return self._send(404, {"error": {"message": f"unknown model {body.get('model')!r}"}})
                time.sleep(latency)
                self._send(
                    200,
                    {
                        "object": "chat.completion",
                        "model": body["model"],
                        "choices": [
                            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
                        ],
                        "usage": {"prompt_tokens": 16, "completion_tokens": 8, "total_tokens": 24},
                    },
                )

            def _send(self, status: int, payload: dict):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8321)
    p.add_argument("--latency-s", type=float, default=0.0)
    args = p.parse_args()
    server = ToyTeacherServer(args.host, args.port, args.latency_s)
    print(f"toy teachers (models: right, wrong) at {server.base_url}", flush=True)
    try:
        server._thread.join()
    except KeyboardInterrupt:
        server.close()


if __name__ == "__main__":
    main()
