"""PlanningDetector on the project's tiny byte-level BPE tokenizer (and a SentencePiece-style one): exact rule
cases, words split over tokens, punctuation, apostrophes, boundaries, masks, non-ASCII text, and random texts
against the slow reference (decode, one regex per gram at every character, prefix-decoded token spans)."""

import random

import numpy as np
import pytest
import torch

from verl_ext.advantage import DEFAULT_STRATEGIC_GRAMS, PlanningDetector
from verl_ext.advantage import reference as ref
from verl_ext.advantage.gram_match import GramMatcher, parse_grams
from verl_ext.advantage.token_text import token_byte_table


@pytest.fixture(scope="module")
def detector(tiny_tokenizer):
    return PlanningDetector(tiny_tokenizer)


def encode_rows(tokenizer, texts, pad_to=None):
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    T = pad_to or max(1, max(map(len, rows)))
    ids = torch.full((len(rows), T), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros(len(rows), T, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    return ids, mask


def reference_flags(tokenizer, ids, mask):
    grams = list(DEFAULT_STRATEGIC_GRAMS)
    return [ref.planning_tokens(tokenizer, i.tolist(), m.tolist(), grams) for i, m in zip(ids, mask)]


def planning_text(tokenizer, text, detector):
    """The text of the planning tokens of one response, runs joined by '|'."""
    ids, mask = encode_rows(tokenizer, [text])
    flags = detector(ids, mask)[0].tolist()
    pieces, run = [], []
    for tok, flag in zip(ids[0].tolist(), flags):
        if flag:
            run.append(tok)
        elif run:
            pieces.append(tokenizer.decode(run))
            run = []
    if run:
        pieces.append(tokenizer.decode(run))
    return "|".join(p.strip() for p in pieces)


def test_token_table_rebuilds_the_decoded_text(tiny_tokenizer):
    table = token_byte_table(tiny_tokenizer)
    texts = ["Wait, let me check. That's not right!", "é π → 日本 ≈ 3.14", "<|im_end|> tail", "a\n\n  b\t'c'"]
    for text in texts:
        ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
        assert b"".join(table[i] for i in ids).decode() == tiny_tokenizer.decode(ids, skip_special_tokens=False)


def test_gram_words_are_split_over_several_tokens_here(tiny_tokenizer):
    pieces = [tiny_tokenizer.decode([i]) for i in tiny_tokenizer("double check", add_special_tokens=False)["input_ids"]]
    assert len(pieces) > 2  # "double" alone takes several tokens in the tiny vocabulary


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Wait, let me check the sum.", "Wait, let me check"),  # overlapping grams, punctuation between words
        ("we must double check it", "double check"),  # "double" is three tokens
        ("so double-check it", "double-check"),
        ("WAIT,LET ME go", "WAIT,LET ME"),
        ("wait... let\n\nme see", "wait... let\n\nme"),
        ("That's not right, redo", "That's not right"),
        ("That\u2019s not right, redo", "That\u2019s not right"),
        ("Then the key insight: x is 2", "the key insight"),
        ("On second thought we go back and start over", "On second thought|go back and start over"),
        ("x = 2. Notice that y = 3", "Notice that"),
    ],
)
def test_rule_examples(tiny_tokenizer, detector, text, expected):
    assert planning_text(tiny_tokenizer, text, detector) == expected


@pytest.mark.parametrize(
    "text",
    [
        "outlet me think",
        "let me thinking",
        "wait_let me go",
        "waitlet me go",
        "thats not right",
        "is this rightly so",
        "the keys is",
        "wait: let_me",
        "the key \u0131s here",
    ],  # a dotless ı is not an ASCII i
)
def test_no_match_without_word_boundaries_or_exact_words(tiny_tokenizer, detector, text):
    assert planning_text(tiny_tokenizer, text, detector) == ""


def test_unicode_lookalikes_of_ascii_letters_do_not_match():
    # (tokenizers may NFC-normalise the Kelvin sign to K before this point; the matcher itself never folds it)
    matcher = GramMatcher(["the key is"])
    text = "the \u212aey is. the key \u0131s. the KEY IS".encode()
    starts, ends = matcher.find_spans(text, np.array([0]), np.array([len(text)]))
    assert [text[s:e].decode() for s, e in zip(starts, ends)] == ["the KEY IS"]


def test_non_ascii_rows(tiny_tokenizer, detector):
    assert planning_text(tiny_tokenizer, "π ≈ 3.14. Wait — let me check", detector) == "Wait — let me check"
    assert planning_text(tiny_tokenizer, "é wait let me", detector) == "wait let me"
    assert planning_text(tiny_tokenizer, "éwait let me", detector) == ""  # é is a word character
    assert planning_text(tiny_tokenizer, "naïve. Notice that ok", detector) == "Notice that"


def test_custom_grams_list_string_single_word_long_word_and_non_ascii(tiny_tokenizer):
    det = PlanningDetector(tiny_tokenizer, "hmm, alternatively we, überprüfen wir")
    assert det.grams == ("hmm", "alternatively we", "überprüfen wir")
    assert planning_text(tiny_tokenizer, "Hmm. Alternatively, we add", det) == "Hmm|Alternatively, we"
    assert planning_text(tiny_tokenizer, "Jetzt ÜBERPRÜFEN wir das", det) == "ÜBERPRÜFEN wir"
    assert planning_text(tiny_tokenizer, "hmmm alternativelywe", det) == ""
    assert PlanningDetector(tiny_tokenizer, ["notice that"]).grams == ("notice that",)


def test_masks_padding_and_holes(tiny_tokenizer, detector):
    ids, mask = encode_rows(tiny_tokenizer, ["Wait, let me check it", "notice that", "", "so let me think"], pad_to=24)
    mask[3, 1:3] = 0  # a hole inside the text ("so let" region): the text still reads through it
    flags = detector(ids, mask)
    assert flags.dtype == torch.bool and flags.shape == ids.shape
    assert not flags[mask == 0].any()
    assert not flags[2].any()
    assert flags.int().tolist() == reference_flags(tiny_tokenizer, ids, mask)
    assert flags[3].any()  # "let me think" spans the hole


def test_ids_beyond_the_vocabulary_and_bad_ids(tiny_tokenizer, detector):
    ids, mask = encode_rows(tiny_tokenizer, ["notice that"])
    extended = torch.cat([ids, torch.tensor([[len(tiny_tokenizer) + 5]])], dim=1)
    flags = detector(extended, torch.cat([mask, torch.ones(1, 1, dtype=torch.long)], dim=1))
    assert flags[0, :-1].all() and not flags[0, -1]
    with pytest.raises(ValueError, match="negative token id"):
        detector(torch.tensor([[5, -3]]), torch.ones(1, 2))
    with pytest.raises(ValueError, match="must both be"):
        detector(ids, mask[:, :1])
    assert detector(torch.zeros(0, 4, dtype=torch.long), torch.zeros(0, 4)).shape == (0, 4)
    assert detector(torch.zeros(3, 0, dtype=torch.long), torch.zeros(3, 0)).shape == (3, 0)


WORDS = (
    "the a of to is we so then let me think check wait verify right this that's not thats key insight notice "
    "that go back and start over double try another approach way or could what if on second thought doesn't work "
    "x y 2 + = é π naïve café"
).split()
SEPARATORS = [" ", " ", " ", ", ", ". ", "\n", " -- ", "... ", " — ", "_", "'", "’ "]


def random_text(rng, n_words):
    parts = []
    for _ in range(n_words):
        word = rng.choice(WORDS + list(DEFAULT_STRATEGIC_GRAMS))
        word = word.upper() if rng.random() < 0.1 else (word.capitalize() if rng.random() < 0.2 else word)
        parts.append(word)
        parts.append(rng.choice(SEPARATORS))
    return "".join(parts).strip()


@pytest.mark.parametrize("seed", range(6))
def test_random_texts_match_the_reference(tiny_tokenizer, detector, seed):
    rng = random.Random(seed)
    texts = [random_text(rng, rng.randint(0, 14)) for _ in range(16)]
    ids, mask = encode_rows(tiny_tokenizer, texts)
    flags = detector(ids, mask)
    assert flags.int().tolist() == reference_flags(tiny_tokenizer, ids, mask)
    assert flags.any()


def test_candidate_search_equals_a_full_scan_on_ascii_text():
    """The run-key prefilter must never drop a match: compare with scanning every position with the regex."""
    import re

    from verl_ext.advantage.gram_match import gram_regex

    rng = random.Random(7)
    grams = parse_grams(list(DEFAULT_STRATEGIC_GRAMS) + ["hmm", "alternatively we", "x2_y z"])
    matcher = GramMatcher(grams)
    full = re.compile(gram_regex(grams).encode(), re.IGNORECASE)
    rows = [random_text(rng, 40).encode("ascii", "ignore") + b" Alternatively,we X2_Y z hmm" for _ in range(30)]
    buf = b"\n".join(rows)
    starts = np.cumsum([0] + [len(r) + 1 for r in rows[:-1]])
    ends = starts + np.array([len(r) for r in rows])
    got = set(zip(*[a.tolist() for a in matcher.find_spans(buf, starts, ends)]))
    expected = set()
    for s, e in zip(starts.tolist(), ends.tolist()):
        row = buf[s:e]
        expected |= {(s + m.start(), s + m.end()) for k in range(len(row)) if (m := full.match(row, k))}
    assert got == expected and len(expected) > 30


def test_sentencepiece_style_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    sp = Tokenizer(models.BPE(unk_token="<unk>"))
    sp.pre_tokenizer = pre_tokenizers.Metaspace()
    sp.decoder = decoders.Metaspace()
    corpus = [random_text(random.Random(s), 30) for s in range(200)]
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<pad>"], show_progress=False)
    sp.train_from_iterator(corpus, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=sp, unk_token="<unk>", pad_token="<pad>")
    det = PlanningDetector(tok)
    texts = ["Wait, let me check it", "so notice that", "nothing here", "go back and start over"]
    ids, mask = encode_rows(tok, texts)
    flags = det(ids, mask)
    assert flags.int().tolist() == reference_flags(tok, ids, mask)
    assert flags[0].any() and flags[1].any() and not flags[2].any()
