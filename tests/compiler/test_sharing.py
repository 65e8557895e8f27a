"""Blocks that share a layer (same weights, same signature) batch as one op."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import refold as td
from refold.compiler import Compiler


def two_uses_of_one_layer():
    fc = td.FC(3)
    # two distinct Function blocks (one per record field) over one layer
    return td.Map(td.Record((td.Vector(2) >> fc, td.Vector(2) >> fc))
                  >> td.Function(tf.add)) >> td.Sum()


def test_shared_layers_run_as_one_launch_and_per_instance_as_two():
    batch = [[([1.0, 2.0], [3.0, 4.0])], [([0.5, -1.0], [2.0, 0.0]), ([1.0, 1.0], [0.0, 1.0])]]
    shared = Compiler.create(two_uses_of_one_layer())
    apart = Compiler.create(two_uses_of_one_layer(), share_layers=False)
    def fc_ops(c):
        return [op for op in c.program.ops if op.name == "FC"]
    assert len(fc_ops(shared)) == 1 and len(fc_ops(apart)) == 2
    # both FC uses run in the prelude: one launch shared, two apart
    assert apart.schedule(batch).stats.launches > shared.schedule(batch).stats.launches
    # the same function either way
    block = two_uses_of_one_layer()
    a = Compiler.create(block).run(batch)
    b = Compiler.create(block, share_layers=False).run(batch)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-6)
