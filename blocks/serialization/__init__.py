"""Saving a block expression as a config and making it again, by stable registered names.

- `config`: `serialize` and `deserialize` a block expression.
- `registry`: the names saved files use for block classes and factories (`"refold>Pipe"`).
"""
