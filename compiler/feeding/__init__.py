"""Feeding a `Model`: Python inputs and labels into packed batches, ahead of the device.

- `feeder`: the `Feeder` protocol every source of a call's batches implements.
- `prefetch`: items made on a background thread, a bounded number ahead (`Prefetch`).
- `lists`: inputs held in memory (lists, arrays), labels, validation splits (`InputPipeline`).
- `streams`: generators, iterables, `PyDataset`s and files read line by line (`Lines`).
- `shards`: which items of a stream a worker reads, and how they make its steps.
- `process_pool`: expanding and planning in worker processes (`ExpansionPool`, `StreamWorkers`).
- `packed`: the flat tensors a planned batch becomes (the step's and the SavedModel's signature).
- `handoff`: how a packed batch enters a traced step, in as few tensors as it allows.
- `xla_buckets`: packed batches padded to buckets for steps compiled with XLA.
"""
