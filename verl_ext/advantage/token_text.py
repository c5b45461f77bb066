"""Exact bytes of every token id, so a response's text can be rebuilt by concatenation.

Why bytes and not `tokenizer.decode([id])`: byte-level BPE (GPT-2, Qwen, Llama-3) splits multi-byte UTF-8
characters across tokens, so decoding one id at a time yields U+FFFD pieces whose concatenation is not the
decoded text. Concatenating the tokens' raw bytes is exact: `b"".join(table[i] for i in ids).decode()` equals
`tokenizer.decode(ids, skip_special_tokens=False)` for byte-level tokenizers.

Supported decoders (read from the fast tokenizer's backend):
- `ByteLevel`: every char of a token string maps back to one byte through the GPT-2 byte<->unicode table.
- SentencePiece style (`Metaspace`, or a `Sequence` with `Replace("▁", " ")` / `ByteFallback`): "▁" is a space,
  `<0xHH>` is the raw byte HH. The text keeps the leading space that `decode` strips; that never changes a
  word-bounded match.
- anything else: `tokenizer.decode([id])` per id (exact for tokenizers whose tokens are whole characters).
Added/special tokens contribute their literal content, as `decode(..., skip_special_tokens=False)` does.
"""

from __future__ import annotations

import json
import re

_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def gpt2_unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's `bytes_to_unicode` table (printable bytes map to themselves, the rest to 256+n)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    table = {chr(b): b for b in printable}
    n = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + n)] = b
            n += 1
    return table


def _decoder_kind(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or backend.decoder is None:
        return "per_id"
    state = json.loads(backend.decoder.__getstate__())
    types = [d["type"] for d in state.get("decoders", [state])]
    if "ByteLevel" in types:
        return "byte_level"
    if "Metaspace" in types or "ByteFallback" in types:
        return "sentencepiece"
    return "per_id"


def token_byte_table(tokenizer) -> list[bytes]:
    """bytes of each id in 0..len(tokenizer)-1 (see the module docstring for the rule per decoder)."""
    n = len(tokenizer)
    kind = _decoder_kind(tokenizer)
    added = {i: t.content for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()}
    pieces = tokenizer.convert_ids_to_tokens(list(range(n)))
    u2b = gpt2_unicode_to_byte()
    table = []
    for i, piece in enumerate(pieces):
        if i in added:
            table.append(added[i].encode())
        elif piece is None:
            table.append(b"")
        elif kind == "byte_level" and all(c in u2b for c in piece):
            table.append(bytes(u2b[c] for c in piece))
        elif kind == "sentencepiece":
            m = _BYTE_FALLBACK.match(piece)
            table.append(bytes([int(m.group(1), 16)]) if m else piece.replace("\u2581", " ").encode())
        else:  # other decoders, or a byte-level vocab entry outside the byte alphabet
            table.append(tokenizer.decode([i], skip_special_tokens=False).encode())
    return table
