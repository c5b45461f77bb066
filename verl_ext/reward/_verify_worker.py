"""Child process that runs math_verify: one JSON request per stdin line, one reply per stdout line.

Started by ``verify_pool.VerifyPool`` as ``python <this file>`` (a script, not ``-m``, so it needs nothing but
math_verify on the path and never re-imports the parent's ``__main__``, which matters inside Ray workers).

Protocol: the child prints ``ready`` once math_verify is imported and warmed up. Each request is
``[gold, pred, seconds, raw]``: ``gold`` is an answer content, wrapped in ``\\boxed{}`` here; ``pred`` is an answer
content wrapped the same way, or, with ``raw`` true, a piece of the response that math_verify extracts the answer
from itself (used for responses with several boxes). The reply is ``1``, ``0`` or ``e`` (math_verify raised).
math_verify's own signal-based timeouts work here because this is the main thread
of its own process; they are a second line of defence for when the parent is gone. The parent enforces the real
limit by killing this process.
"""

import json
import logging
import os
import sys
import threading
import time


def _exit_when_orphaned(parent_pid: int) -> None:
    # A parent killed with SIGKILL cannot clean up; stop instead of lingering with a half-done job.
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os._exit(0)


_WARM_UP = [
    ("\\frac{1}{2}", "0.5"),
    ("x^2+7x+10", "(x+5)(x+2)"),
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}"),
    ("[1,2)", "(1, 2]"),
    ("\\{1,2\\}", "\\{2,1\\}"),
    ("2\\pi", "\\pi \\cdot 2"),
    ("6-5i", "6+5i"),
    ("a=3", "3"),
    ("\\text{(A)}", "A"),
]


def main() -> None:
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), daemon=True).start()
    logging.disable(logging.WARNING)  # math_verify logs every timeout and parse failure

    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    gold_targets = (LatexExtractionConfig(),)
    pred_targets = (LatexExtractionConfig(), ExprExtractionConfig())

    def check(gold: str, pred: str, seconds: int, raw: bool = False) -> bool:
        gold_parsed = parse("\\boxed{" + gold + "}", gold_targets, parsing_timeout=seconds)
        pred_parsed = parse(pred if raw else "\\boxed{" + pred + "}", pred_targets, parsing_timeout=seconds)
        if not gold_parsed or not pred_parsed:
            return False
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=seconds))

    # The first check of each kind of expression loads sympy modules and fills caches (up to ~1 s on a busy
    # machine): do it before reporting ready, so no timed request pays for it.
    for gold, pred in _WARM_UP:
        check(gold, pred, 30)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        try:
            gold, pred, seconds, raw = json.loads(line)
            reply = "1" if check(gold, pred, int(seconds), bool(raw)) else "0"
        except Exception:
            reply = "e"
        out.write(reply + "\n")
        out.flush()


if __name__ == "__main__":
    main()
