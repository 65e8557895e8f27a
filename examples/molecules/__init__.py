"""The molecules example: weave graph convolutions over random molecule-like graphs."""
