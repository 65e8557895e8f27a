"""The function-names example: a TreeLSTM over Python syntax trees from the standard library."""
