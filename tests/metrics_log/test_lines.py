"""The relay's line splitter (verl_ext/metrics_log/lines.py): every byte out once and in order, lines whole, and an
over-long line out in pieces as it arrives, in time and memory bounded by what was read."""

from __future__ import annotations

import random
import time

import pytest

from verl_ext.metrics_log.lines import LineSplitter


def _split(chunks, cap=64):
    s = LineSplitter(cap)
    out = [p for c in chunks for p in s.feed(c)]
    return out, s.rest()


def test_lines_end_at_newline_crlf_and_a_lone_cr_even_across_chunks():
    out, rest = _split([b"a\nb\r", b"\nprogress 1\rprogress 2\r", b"c", b"\n", b"tail"])
    assert out == [(b"a\n", True), (b"b\r\n", True), (b"progress 1\r", True), (b"progress 2\r", True), (b"c\n", True)]
    assert rest == b"tail"


def test_a_line_longer_than_the_cap_goes_out_in_pieces_none_of_them_whole():
    s = LineSplitter(cap=10)
    assert s.feed(b"x" * 8) == []
    assert s.feed(b"x" * 8) == [(b"x" * 16, False)]  # its head, once over the cap
    assert s.feed(b"yy\nstep 1/2 | ok\n") == [(b"yy\n", False), (b"step 1/2 | ok\n", True)]  # its end, then a line
    assert s.rest() == b""


@pytest.mark.parametrize("seed", range(5))
def test_every_byte_comes_out_once_in_order_and_the_held_bytes_stay_under_the_cap(seed):
    rng = random.Random(seed)
    data = bytes(rng.choice(b"ab\n\r") if rng.random() < 0.3 else rng.choice(b"xyz") for _ in range(20_000))
    data += b"q" * 5_000  # a long line with no end
    cap, s, out = 100, LineSplitter(100), []
    i = 0
    while i < len(data):
        n = rng.randint(1, 300)
        out += s.feed(data[i : i + n])
        i += n
        assert len(s._pending) <= cap
    assert b"".join(p for p, _ in out) + s.rest() == data
    for piece, whole in out:
        if whole:  # a whole line: one separator, at its end
            body = piece.rstrip(b"\r\n")
            assert b"\n" not in body and b"\r" not in body and piece != body


def test_a_line_of_megabytes_costs_time_linear_in_its_size():
    """32 MiB with no newline in 64 KiB reads: the old relay's `pending += chunk` and split over the whole buffer made
    this quadratic (minutes); linear, it is well under a second."""
    chunk = b"z" * 65536
    s = LineSplitter()
    start = time.perf_counter()
    total = sum(len(p) for _ in range(512) for p, _ in s.feed(chunk))
    total += sum(len(p) for p, _ in s.feed(b"\n"))
    assert total == 512 * 65536 + 1
    assert time.perf_counter() - start < 5.0
