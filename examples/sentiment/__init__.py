"""The sentiment example: SST-format treebanks, a synthetic treebank, and models over them."""
