"""The serving example: train, export, and answer concurrent requests in a fresh process."""
