"""The tagger examples: a BiLSTM part-of-speech tagger on a synthetic language
(`python -m examples.tagger`), and the same tagger reading rare words from their
spelling with a character BiLSTM, on an open-vocabulary language
(`python -m examples.tagger.chars`)."""
