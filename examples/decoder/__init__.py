"""Greedy decoding with `td.Unfold`: reverse a digit string, stop at the end symbol."""
