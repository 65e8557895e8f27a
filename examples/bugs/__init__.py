"""The bug-detector example: seeded bugs in the standard library, trees against sequences."""
