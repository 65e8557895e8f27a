"""The parser example: a transition-based dependency parser (BiLSTM features, arc-hybrid
transitions, greedy decoding) on a synthetic treebank in CoNLL-U."""
