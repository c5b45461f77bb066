"""Strategic-gram matching on text: the matching rule of the planning-token detector.

The rule. An *occurrence* of a gram is a piece of text that matches the gram's regex:
- The gram is split on whitespace into words. Between two consecutive gram words the text may hold any run of one
  or more non-word characters (`\\W+`: spaces, newlines, punctuation, dashes, quotes): "Wait, let me" and
  "wait -- let\\nme" match "wait let me"; "double-check" matches "double check".
- Inside a gram word the characters match literally except for case, and an apostrophe also matches the typographic
  apostrophe U+2019 ("that's" matches "That’s").
- Case: an ASCII letter of a gram matches its ASCII lower and upper case only (so the Kelvin sign or a dotless ı
  never stand in for k or i); any other character of a gram matches under Unicode case folding.
- The occurrence starts and ends at a word boundary (`\\b`): "let me think" occurs in "Let me think." but not in
  "outlet me think" or "let me thinking"; "wait_let me" and "waitlet me" do not match "wait let me".
- Word characters are Python's `\\w` for str (Unicode letters and digits, underscore).
The detector marks the text covered by *all* occurrences of *all* grams (overlapping ones included: in
"wait, let me check" both "wait let me" and "let me check" occur).

How it is found fast (`GramMatcher.find_spans`, a whole batch at once). A match of an ASCII gram starts at a run of
ASCII word bytes equal (after ASCII lower-casing) to the gram's first word run, and the next run equals the gram's
second run, where runs are cut at every byte that is not an ASCII word byte (non-ASCII bytes cut runs too, so this
holds for any text). Runs are keyed by their first 8 bytes with numpy, and the regex is tried only at runs whose
key pair is some gram's: equal runs have equal keys, so no match is lost, and the regex decides exactly. On rows
that are pure ASCII the regex runs on the lower-cased bytes; on other rows the row is decoded and the str regex runs
at the same candidate places. Grams with non-ASCII characters can only occur in non-ASCII rows, which are scanned
for them in full.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

DEFAULT_STRATEGIC_GRAMS: tuple[str, ...] = (
    "wait let me",
    "let me think",
    "on second thought",
    "let me check",
    "let me verify",
    "is this right",
    "double check",
    "try another approach",
    "go back and",
    "start over",
    "that's not right",
    "that doesn't work",
    "another way to",
    "or we could",
    "what if we",
    "notice that",
    "the key is",
    "the key insight",
)

_WORD_EDGES = re.compile(r"^\w(.*\w)?$", re.DOTALL)

_ASCII_WORD = np.zeros(256, dtype=bool)  # ASCII word bytes [0-9A-Za-z_]; every other byte cuts a run
_ASCII_WORD[list(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")] = True

# A run's key: its first 8 bytes as a little-endian uint64, bytes past the run zeroed (runs never hold a 0 byte).
_KEEP_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [2**64 - 1], dtype=np.uint64)
_PAIR_MIX = 0x9E3779B97F4A7C15  # pair key = first * _PAIR_MIX + second (mod 2**64)


def parse_grams(grams: str | Iterable[str] | None) -> tuple[str, ...]:
    """Normalise a gram list or one comma-separated string; None means the 18 defaults.

    Each gram is stripped and its inner whitespace collapsed. A gram must start and end with a word character,
    otherwise a word boundary at its edge means nothing.
    """
    if grams is None:
        return DEFAULT_STRATEGIC_GRAMS
    items = grams.split(",") if isinstance(grams, str) else list(grams)
    out = []
    for raw in items:
        if not isinstance(raw, str):
            raise ValueError(f"strategic_grams: every gram must be a string, got {raw!r}")
        gram = " ".join(raw.split())
        if not gram:
            continue
        if not _WORD_EDGES.match(gram):
            raise ValueError(f"strategic_grams: gram {raw!r} must start and end with a letter, digit or '_'")
        out.append(gram)
    if not out:
        raise ValueError(f"strategic_grams: no gram in {grams!r}")
    return tuple(dict.fromkeys(out))


def _char_regex(ch: str, lowered_ascii: bool) -> str:
    if ch == "'":
        return "'" if lowered_ascii else "['\u2019]"
    if ch.isascii() and ch.isalpha():
        return ch.lower() if lowered_ascii else f"[{ch.lower()}{ch.upper()}]"
    if ch.isascii():
        return re.escape(ch)
    return f"(?i:{re.escape(ch)})"


def gram_regex(grams: Iterable[str], lowered_ascii: bool = False) -> str:
    """The alternation `\\b(?:g1|g2|...)\\b`; lowered_ascii=True gives the form for lower-cased ASCII text.

    Grams with more word runs come first, so at one start the first alternative that matches covers the others.
    """
    ordered = sorted(grams, key=lambda g: (-len(re.findall(r"\w+", g)), -len(g)))
    alternatives = (r"\W+".join("".join(_char_regex(c, lowered_ascii) for c in w) for w in g.split()) for g in ordered)
    return r"\b(?:" + "|".join(alternatives) + r")\b"


def _run_key(run: str) -> int:
    return int.from_bytes(run.encode()[:8], "little")  # missing high bytes are zero, as in the batch keys


def _overlapping_search(pattern: re.Pattern, text: str) -> list[tuple[int, int]]:
    # finditer would skip an occurrence that starts inside the previous one: restart one char after each start.
    spans = []
    m = pattern.search(text)
    while m is not None:
        spans.append(m.span())
        m = pattern.search(text, m.start() + 1)
    return spans


def _char_to_byte_offsets(text: str) -> np.ndarray:
    """offsets[k] = UTF-8 byte offset of character k (len(text)+1 entries; surrogate escapes count 1 byte)."""
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    nbytes = 1 + (cps >= 0x80).astype(np.int64) + (cps >= 0x800) + (cps >= 0x10000)
    nbytes[(cps >= 0xDC80) & (cps <= 0xDCFF)] = 1  # undecodable bytes kept by "surrogateescape"
    return np.concatenate(([0], np.cumsum(nbytes)))


class GramMatcher:
    """Finds the byte spans of gram occurrences in UTF-8 text, by the rule in the module docstring."""

    def __init__(self, grams: str | Iterable[str] | None = None):
        self.grams = parse_grams(grams)
        ascii_grams = [g for g in self.grams if g.isascii()]
        other_grams = [g for g in self.grams if not g.isascii()]
        self._bytes_pattern = re.compile(gram_regex(ascii_grams, lowered_ascii=True).encode()) if ascii_grams else None
        self._ascii_text_pattern = re.compile(gram_regex(ascii_grams)) if ascii_grams else None
        self._other_text_pattern = re.compile(gram_regex(other_grams)) if other_grams else None
        pairs, singles = set(), set()
        for gram in ascii_grams:
            runs = re.findall(r"[0-9a-z_]+", gram.lower())
            if len(runs) == 1:
                singles.add(_run_key(runs[0]))
            else:
                pairs.add((_run_key(runs[0]) * _PAIR_MIX + _run_key(runs[1])) % 2**64)
        self._pair_keys = np.array(sorted(pairs), dtype=np.uint64)
        self._single_keys = np.array(sorted(singles), dtype=np.uint64)

    def find_spans(self, buf: bytes, row_start: np.ndarray, row_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends): byte spans in `buf` of all occurrences inside the rows buf[row_start[r]:row_end[r]].

        Rows must be in order, must not overlap, and must be separated by at least one byte that is not an ASCII
        word byte (e.g. b"\\n"), so that no run crosses a row boundary.
        """
        high = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8) >= 0x80)
        non_ascii = np.zeros(len(row_start), dtype=bool)
        non_ascii[np.searchsorted(row_start, high, side="right") - 1] = True
        spans: list[tuple[int, int]] = []
        if self._bytes_pattern is not None:
            lower = buf.lower()  # lower-cases ASCII bytes only
            cand = self._candidates(lower)
            rows = np.searchsorted(row_start, cand, side="right") - 1
            in_ascii_row = ~non_ascii[rows]
            match = self._bytes_pattern.match
            for pos, end in zip(cand[in_ascii_row].tolist(), row_end[rows[in_ascii_row]].tolist()):
                m = match(lower, pos)
                if m is not None and m.end() <= end:
                    spans.append(m.span())
            self._match_in_decoded_rows(buf, row_start, row_end, cand[~in_ascii_row], rows[~in_ascii_row], spans)
        if self._other_text_pattern is not None:
            self._scan_rows_for_other_grams(buf, row_start, row_end, np.flatnonzero(non_ascii), spans)
        out = np.array(spans, dtype=np.int64).reshape(-1, 2)
        return out[:, 0], out[:, 1]

    def _candidates(self, lower: bytes) -> np.ndarray:
        """Byte offsets of the runs whose (run, next run) key pair, or run key for one-run grams, is a gram's."""
        la = np.frombuffer(lower, dtype=np.uint8)
        edge = np.diff(_ASCII_WORD[la].view(np.int8), prepend=np.int8(0), append=np.int8(0))
        run_start = np.flatnonzero(edge == 1)
        if run_start.size == 0:
            return run_start
        run_len = np.flatnonzero(edge == -1) - run_start
        windows = np.lib.stride_tricks.sliding_window_view(np.concatenate((la, np.zeros(8, np.uint8))), 8)
        keys = np.ascontiguousarray(windows[run_start]).view("<u8").ravel() & _KEEP_BYTES[np.minimum(run_len, 8)]
        hit = np.zeros(run_start.size, dtype=bool)
        if self._pair_keys.size:
            hit[:-1] = np.isin(keys[:-1] * np.uint64(_PAIR_MIX) + keys[1:], self._pair_keys)
        if self._single_keys.size:
            hit |= np.isin(keys, self._single_keys)
        return run_start[hit]

    def _match_in_decoded_rows(self, buf, row_start, row_end, cand, cand_rows, spans) -> None:
        """Try the str regex of the ASCII grams at the candidates (sorted) that lie in rows with non-ASCII bytes."""
        if cand.size == 0:
            return
        bounds = np.flatnonzero(np.diff(cand_rows, prepend=-1, append=-1))
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            r = int(cand_rows[a])
            base = int(row_start[r])
            text = buf[base : int(row_end[r])].decode("utf-8", "surrogateescape")
            offsets = _char_to_byte_offsets(text)
            char_pos = np.searchsorted(offsets, cand[a:b] - base)  # candidates sit on ASCII bytes: char starts
            for c in char_pos.tolist():
                m = self._ascii_text_pattern.match(text, c)
                if m is not None:
                    spans.append((base + int(offsets[m.start()]), base + int(offsets[m.end()])))

    def _scan_rows_for_other_grams(self, buf, row_start, row_end, rows, spans) -> None:
        for r in rows.tolist():
            base = int(row_start[r])
            text = buf[base : int(row_end[r])].decode("utf-8", "surrogateescape")
            found = _overlapping_search(self._other_text_pattern, text)
            if found:
                offsets = _char_to_byte_offsets(text)
                spans.extend((base + int(offsets[s]), base + int(offsets[e])) for s, e in found)
