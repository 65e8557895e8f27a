"""The synthetic compositional treebank: its rules, reproducibility, and shipped files."""

import os

import numpy as np
import pytest

from refold.examples.sentiment import synthetic
from refold.examples.sentiment.synthetic import relabel, score_of, write_splits
from refold.examples.sentiment.treebank import leaves, parse_tree, read_treebank, to_ptb

DATA = os.path.join(os.path.dirname(synthetic.__file__), "data")


def _labels(line: str) -> str:
    return to_ptb(relabel(parse_tree(line)))


@pytest.mark.parametrize("phrase, score", [
    ("good", 1), ("great", 2), ("movie", 0), ("dull", -1), ("awful", -2),
    ("not good", -1), ("not bad", 1), ("not great", -1), ("not awful", 1), ("not new", 0),
    ("very good", 2), ("very dull", -2), ("very new", 0), ("very great", 2),
    ("not very good", -1), ("very not good", -2),
    ("good but dull", -1), ("dull but good", 1), ("dull but new", -1),
    ("great and awful", 0), ("good and nice", 2), ("dull and new", -1),
])
def test_phrase_scores_follow_the_rules(phrase, score):
    assert score_of(phrase) == score


def test_relabel_sets_every_node_from_its_children():
    line = "(2 (2 (2 the) (2 movie)) (2 (2 is) (2 (2 not) (2 (2 very) (2 good)))))"
    assert _labels(line) == \
        "(1 (2 (2 the) (2 movie)) (1 (2 is) (1 (2 not) (4 (2 very) (3 good)))))"


def test_relabel_clips_sums_and_rejects_non_binary_trees():
    assert _labels("(2 (2 great) (2 (2 a) (2 masterpiece)))").startswith("(4 ")
    with pytest.raises(ValueError, match="binary"):
        relabel(parse_tree("(2 (2 a) (2 b) (2 c))"))


def test_shipped_data_is_what_the_documented_command_writes(tmp_path):
    write_splits(tmp_path, seed=0)
    for split, n in synthetic.SPLITS.items():
        with open(os.path.join(DATA, f"{split}.txt"), encoding="utf-8") as f:
            shipped = f.read()
        assert (tmp_path / f"{split}.txt").read_text(encoding="utf-8") == shipped, split
        assert shipped.count("\n") == n


def test_a_different_seed_gives_different_trees(tmp_path):
    a = write_splits(tmp_path / "a", seed=1, sizes={"train": 20})["train"]
    b = write_splits(tmp_path / "b", seed=2, sizes={"train": 20})["train"]
    assert [to_ptb(t) for t in a] != [to_ptb(t) for t in b]


def test_shipped_labels_agree_with_the_rules_everywhere():
    for split in synthetic.SPLITS:
        for tree in read_treebank(os.path.join(DATA, f"{split}.txt")):
            assert to_ptb(relabel(parse_tree(to_ptb(tree)))) == to_ptb(tree)


def test_shipped_data_has_all_labels_negation_intensifiers_and_contrast():
    trees = read_treebank(os.path.join(DATA, "train.txt"))
    roots = np.bincount([t["label"] for t in trees], minlength=5)
    assert roots.min() > 0.05 * len(trees)
    words = [set(leaves(t)) for t in trees]
    for group in (synthetic.NEGATIONS, synthetic.INTENSIFIERS, synthetic.CONTRASTS):
        assert sum(bool(w & set(group)) for w in words) > 0.1 * len(trees)


def _swap_clauses(tree):
    """`(C1 (but C2))` -> `(C2 (but C1))`: the same words, another tree."""
    c1, (joiner, c2) = tree["children"][0], tree["children"][1]["children"]
    return relabel({"label": 2, "children": [
        c2, {"label": 2, "children": [joiner, c1]}]})


def test_bags_of_words_do_not_determine_the_root_label():
    # Swapping the clauses of "C1 but C2" keeps the bag of words and, in many shipped
    # sentences, changes the root label: no bag-of-words model can get both right.
    trees = read_treebank(os.path.join(DATA, "train.txt"))
    contrasts = [t for t in trees if "children" in t and "children" in t["children"][1]
                 and t["children"][1]["children"][0].get("word") in synthetic.CONTRASTS]
    assert len(contrasts) > 0.25 * len(trees)
    changed = [_swap_clauses(parse_tree(to_ptb(t)))["label"] != t["label"]
               for t in contrasts]
    assert sorted(leaves(_swap_clauses(contrasts[0]))) == sorted(leaves(contrasts[0]))
    assert np.mean(changed) > 0.5
    assert score_of("the plot is good but the cast is dull") != \
        score_of("the plot is dull but the cast is good")
