"""The tagger example: a BiLSTM part-of-speech tagger on a synthetic language."""
