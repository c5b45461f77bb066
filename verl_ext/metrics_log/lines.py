"""Bytes read from a pipe, cut into lines in time and memory bounded by what is read (the terminal's relay,
terminal.py): each chunk is split on its own, and a line longer than `cap` goes out in pieces as it arrives instead
of being held until its end (a worker writing 50 MB without a newline must not grow the relay's buffer to 50 MB or
rescan it on every read)."""

from __future__ import annotations

import re

_SEP = re.compile(rb"\r\n|\n|\r")  # a line ends at \n, \r\n, or a lone \r (a progress bar's redraw)
MAX_LINE = 64 * 1024  # bytes of an unfinished line held before they go out as a piece


class LineSplitter:
    """`feed(chunk)` returns the pieces the chunk completes, in order, each as (bytes, whole): `whole` is a complete
    line, separator included; not `whole` is part of a line longer than `cap` (its head once it exceeds `cap`, then
    the rest, its last piece ending with the separator). Every byte fed comes out exactly once, in order: the pieces
    of `feed` and then `rest()` concatenate to the input."""

    def __init__(self, cap: int = MAX_LINE):
        self.cap = cap
        self._pending = bytearray()  # the unfinished line (at most `cap` bytes)
        self._cut = False  # the unfinished line's head already went out (it is not whole)

    def feed(self, chunk: bytes) -> list[tuple[bytes, bool]]:
        out: list[tuple[bytes, bool]] = []
        if self._pending.endswith(b"\r") and not chunk.startswith(b"\n"):
            self._emit(b"", out)  # a lone \r held at the previous chunk's end: it ended its line
        start = 0
        for m in _SEP.finditer(chunk):
            if m.end() == len(chunk) and m.group() == b"\r":
                break  # the chunk ends with \r: it may be the first half of \r\n; held with the unfinished line
            self._emit(chunk[start : m.end()], out)
            start = m.end()
        self._pending += chunk[start:]
        if len(self._pending) > self.cap:
            out.append((bytes(self._pending), False))
            self._pending.clear()
            self._cut = True
        return out

    def _emit(self, tail: bytes, out: list) -> None:
        out.append((bytes(self._pending) + tail, not self._cut))
        self._pending.clear()
        self._cut = False

    def rest(self) -> bytes:
        """The unfinished line's bytes not yet returned (at the pipe's end), and a fresh start."""
        rest = bytes(self._pending)
        self._pending.clear()
        self._cut = False
        return rest
