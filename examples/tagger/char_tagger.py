"""A BiLSTM tagger whose rare words are read from their spelling (Plank et al. 2016).

A word is `{"word": id}` if it is frequent, `{"word": 0, "chars": [ids]}` if it is
rare (`examples.tagger.rare_words.Vocabulary.encode`). With `words="char"`, a
frequent word's vector is a row of a lookup table and a rare word's is the final
states of a character BiLSTM over its spelling (forward and backward, concatenated);
with `words="lookup"`, every rare word gets the `<unk>` row. Either way the vectors
then go through the word-level BiLSTM and a linear layer, with a loss at every word,
as in `examples.tagger.tagger.tagger_model`.

`td.OneOf` chooses the path per word, so a batch runs the character LSTM only on its
rare words, with the characters of every rare word of every sentence batched together.

>>> block = char_tagger_model(vocabulary_size=5, words="char", char_embed=3,
...                           char_hidden=2, hidden=4)
>>> logits, metrics = block.eval({"words": [{"word": 3}, {"word": 0, "chars": [1, 2]}],
...                               "tags": [0, 1]})
>>> [x.shape for x in logits], metrics["loss"].shape
([(8,), (8,)], (2,))
"""

from __future__ import annotations

import refold as td
from refold.examples.tagger.rare_words import CHARACTERS, TAGS
from refold.models import encoders, heads, rnn_cells

__all__ = ["WORDS", "word_vector", "char_tagger_model"]

WORDS = ("lookup", "char")
"""How rare words are embedded: all as `<unk>`, or from their characters."""


def word_vector(vocabulary_size: int, words: str = "char", char_embed: int = 20,
                char_hidden: int = 64, characters: int = len(CHARACTERS)) -> td.Block:
    """`{"word": id[, "chars": [ids]]} -> vector[2 * char_hidden]`.

    Args:
        vocabulary_size: the number of word ids (`<unk>`, id 0, included).
        words: "char" (rare words through the character BiLSTM) or "lookup" (rare
            words read id 0, `<unk>`).
        char_embed: the size of a character's embedding.
        char_hidden: the character LSTM's units in each direction; the word lookup's
            rows have `2 * char_hidden` units, so both paths give vectors of one size.
        characters: the size of the alphabet (character ids 1 to `characters`; 0 is
            any other character).
    """
    if words not in WORDS:
        raise ValueError(f"word_vector: words must be one of {WORDS}, got {words!r}")
    lookup = td.GetItem("word") >> td.Scalar("int32") >> td.Embedding(
        vocabulary_size, 2 * char_hidden, name="words")
    if words == "lookup":
        return lookup
    spelling = td.GetItem("chars") >> td.Map(
        td.Scalar("int32") >> td.Embedding(characters + 1, char_embed, name="chars"))
    spelled = spelling >> encoders.sequence_encoder(
        rnn_cells.LSTMCell(char_hidden, name="chars_forward"),
        rnn_cells.LSTMCell(char_hidden, name="chars_backward"))
    return td.OneOf(lambda w: "chars" in w, {False: lookup, True: spelled})


def char_tagger_model(vocabulary_size: int, words: str = "char", char_embed: int = 20,
                      char_hidden: int = 64, hidden: int = 64, tags: str | None = "tags",
                      num_tags: int = len(TAGS), characters: int = len(CHARACTERS),
                      dropout: float = 0.0, recurrent_dropout: float = 0.0) -> td.Block:
    """`{"words": [...], "tags": [...]} -> [tag logits per word]`, with a loss and a hit
    at every word (no metrics if `tags` is None).

    Args:
        vocabulary_size, words, char_embed, char_hidden, characters: as `word_vector`.
        hidden: the word-level LSTM's units in each direction.
        tags: the key of the tag ids, or None for a model that only predicts.
        num_tags: the number of tags (this language's by default; a treebank's from
            its `Vocabulary`).
        dropout, recurrent_dropout: the word-level LSTMs' (`rnn_cells.LSTMCell`): the
            fraction of each word vector and of each state `h` dropped in training.
    """
    vectors = td.GetItem("words") >> td.Map(
        word_vector(vocabulary_size, words, char_embed, char_hidden, characters))
    cells = [rnn_cells.LSTMCell(hidden, name=name, dropout=dropout,
                                recurrent_dropout=recurrent_dropout)
             for name in ("forward", "backward")]
    encoder = vectors >> encoders.bidirectional(*cells)
    return heads.tagger(encoder, num_tags, tags=tags)
