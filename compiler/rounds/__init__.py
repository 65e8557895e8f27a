"""Expansion that depends on computed values (`td.Unfold`): a batch expanded in rounds.

- `context`: the rounds themselves (`expand_in_rounds`, `RoundContext`): examples pause where
  they need a value, the batch computes what they added, and they resume.
- `engines`: the engine each round runs on, built for the ops a round uses (`RoundEngines`).
"""
