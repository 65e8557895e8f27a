"""The model zoo: TreeLSTM and RNN blocks built from `blocks` only."""
