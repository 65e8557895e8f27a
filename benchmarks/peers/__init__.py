"""A peer benchmark the project owns: Refold against our own DyNet programs of the
standard workloads, interleaved in one run (`python -m benchmarks.peers`, see `run`)."""
