"""Planning-token detection by strategic grams (HICRA, Wang et al., arXiv 2509.03646; SEPA).

A token is a *planning token* iff it is masked in and its bytes overlap an occurrence of a strategic gram in the
decoded response text; the matching rule (word runs, punctuation between gram words, apostrophes, boundaries,
overlaps) is in `gram_match`. Precisely:

- Text of a row: `tokenizer.decode(ids[:n], skip_special_tokens=False)` where `n` is one past the last masked-in
  token (tokens inside mask holes, e.g. tool output, belong to the text; trailing padding does not). It is rebuilt
  from each token's exact bytes (`token_text`), so words split over several tokens and UTF-8 characters split over
  several byte-level tokens are handled exactly.
- Token j covers bytes [start_j, end_j) of that text; it is a planning token iff the span overlaps a match. So a
  token holding "t, let" in "wait, let me" is planning, and so is a token holding the tail of "insight" together
  with the following punctuation.

Speed: the token table is cached once per tokenizer as a numpy object array, the whole batch becomes one bytes
buffer (one fancy index, one join; rows separated by b"\\n"), `GramMatcher.find_spans` finds all matches, and the
spans map to tokens with one `np.searchsorted` and a difference array. scripts/bench_advantages.py measures it.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

from verl_ext.advantage.gram_match import DEFAULT_STRATEGIC_GRAMS, GramMatcher
from verl_ext.advantage.token_text import token_byte_table

__all__ = ["DEFAULT_STRATEGIC_GRAMS", "PlanningDetector"]

_JOIN_CHUNK = 4096


def _join(pieces: list[bytes]) -> bytes:
    # bytes.join allocates an 80-byte buffer record per item up front; joining chunks keeps that in cache
    # (about 4x faster on a batch of millions of tokens).
    return b"".join([b"".join(pieces[i : i + _JOIN_CHUNK]) for i in range(0, len(pieces), _JOIN_CHUNK)])


class PlanningDetector:
    """`PlanningDetector(tokenizer, grams=None)(response_ids, response_mask) -> BoolTensor (bs, T)`.

    grams: a list of grams, one comma-separated string, or None for the 18 DEFAULT_STRATEGIC_GRAMS.
    """

    def __init__(self, tokenizer, grams: str | Iterable[str] | None = None):
        self.matcher = GramMatcher(grams)
        self.grams = self.matcher.grams
        self._set_table(token_byte_table(tokenizer))

    def _set_table(self, pieces: list[bytes]) -> None:
        # The last entry is the row separator: a non-word byte, so no word and no match crosses rows.
        self._pieces = np.empty(len(pieces) + 1, dtype=object)
        self._pieces[:-1] = pieces
        self._pieces[-1] = b"\n"
        self._lengths = np.array([len(p) for p in self._pieces], dtype=np.int64)

    def _grow_table(self, max_id: int) -> None:
        # Models often have more embedding rows than the tokenizer has tokens; such ids carry no text.
        pieces = list(self._pieces[:-1])
        self._set_table(pieces + [b""] * (max_id + 1 - len(pieces)))

    def __call__(self, response_ids: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
        if response_ids.dim() != 2 or response_ids.shape != response_mask.shape:
            raise ValueError(
                f"PlanningDetector: response_ids {tuple(response_ids.shape)} and response_mask "
                f"{tuple(response_mask.shape)} must both be (batch, T)"
            )
        ids = response_ids.detach().cpu().numpy().astype(np.int64, copy=False)
        mask = response_mask.detach().cpu().numpy().astype(bool, copy=False)
        bs, T = ids.shape
        if bs == 0 or T == 0:
            return torch.zeros((bs, T), dtype=torch.bool, device=response_mask.device)

        # One past the last masked-in token: the part of each row that is text.
        n = np.where(mask.any(axis=1), T - np.argmax(mask[:, ::-1], axis=1), 0)
        in_text = np.arange(T)[None, :] < n[:, None]
        text_ids = ids[in_text]
        if text_ids.size and text_ids.min() < 0:
            raise ValueError("PlanningDetector: negative token id inside the masked-in response span")
        if text_ids.size and text_ids.max() >= len(self._pieces) - 1:
            self._grow_table(int(text_ids.max()))
        # Layout (bs, T + 1): the row's text tokens, then the separator (the table's last entry) in the extra column.
        separator = len(self._pieces) - 1
        selected = np.concatenate([in_text, np.ones((bs, 1), dtype=bool)], axis=1)
        flat_ids = np.concatenate([ids, np.full((bs, 1), separator, dtype=np.int64)], axis=1)[selected]
        buf = _join(self._pieces[flat_ids].tolist())
        lengths = np.zeros((bs, T + 1), dtype=np.int64)
        lengths[selected] = self._lengths[flat_ids]
        ends = np.cumsum(lengths.ravel())
        starts = ends - lengths.ravel()
        row_start = starts[:: T + 1]
        row_end = starts[T :: T + 1]  # where the separator starts

        match_start, match_end = self.matcher.find_spans(buf, row_start, row_end)
        planning = np.zeros(bs * (T + 1), dtype=bool)
        if match_start.size:
            # token j overlaps [s, e) iff end_j > s and start_j < e; both arrays are sorted.
            first = np.searchsorted(ends, match_start, side="right")
            stop = np.searchsorted(starts, match_end, side="left")
            diff = np.zeros(planning.size + 1, dtype=np.int32)
            np.add.at(diff, first, 1)
            np.add.at(diff, stop, -1)
            planning = np.cumsum(diff[:-1]) > 0
        planning = planning.reshape(bs, T + 1)[:, :T] & mask
        return torch.from_numpy(planning).to(response_mask.device)
