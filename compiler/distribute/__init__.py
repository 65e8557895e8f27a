"""`Model.fit`, `evaluate` and `predict` under `tf.distribute` strategies.

- `strategy`: lists of inputs split over replicas (`ShardFeeder`, `ReplicaSteps`).
- `sharded_streams`: streams where each worker reads only its shard (`ShardedStreamFeeder`).
"""
