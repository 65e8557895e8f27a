"""The tagger examples: a BiLSTM part-of-speech tagger on a synthetic language
(`python -m refold.examples.tagger`), the same tagger reading rare words from their
spelling with a character BiLSTM, on an open-vocabulary language
(`python -m refold.examples.tagger.chars`), and both taggers on a real treebank, the
Turkish Web Treebank or any CoNLL-U file (`python -m refold.examples.tagger --data
turkish-web`, `examples.tagger.treebank`)."""
