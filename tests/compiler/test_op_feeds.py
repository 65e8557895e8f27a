"""Which op feeds which (`compiler.graphs.op_feeds`), and what the layout makes of it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refold as td
from refold.compiler import Compiler
from refold.compiler.graphs.expansion import expand
from refold.compiler.graphs.lowering import lower
from refold.compiler.graphs.op_feeds import op_feeds
from refold.scheduler.errors import EngineError
from refold.scheduler.graph import OpGraph
from refold.scheduler.layout import Layout
from refold.scheduler.planner import Planner
from refold.scheduler.schedules import SCHEDULERS
from tests.compiler import models

EXPANDED = [f for f in models.ALL if not lower(f().block).reads_values]


def observed_feeds(program, graph: OpGraph) -> set:
    """The `(producer op, consumer op)` pairs a graph's nodes actually have."""
    consumer = np.repeat(np.arange(graph.num_nodes), graph.node_arity)
    producer = graph.value_node[graph.node_args]
    made = producer >= 0
    return set(zip(graph.node_op[producer[made]].tolist(),
                   graph.node_op[consumer[made]].tolist()))


@pytest.mark.parametrize("make", EXPANDED, ids=lambda f: f.__name__[5:])
def test_every_feed_an_input_makes_is_one_the_analysis_found(make):
    case = make()
    program = lower(case.block)
    feeds = op_feeds(program)

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(case.inputs, min_size=1, max_size=3))
    def check(inputs):
        graph = OpGraph.concatenate([expand(program, x).graph for x in inputs])
        missed = [(program.ops[a].name, program.ops[b].name)
                  for a, b in observed_feeds(program, graph) if not feeds[a, b]]
        assert not missed

    check()


def projected_rnn():
    """An RNN whose input projection reads vectors as wide as the state it writes."""
    project, cell = td.FC(3, name="project"), td.FC(3, name="cell")
    return td.Map(td.Vector(3) >> project) >> td.Fold(td.Concat() >> cell, td.Zeros(3))


def test_a_pipe_feeds_forward_only_and_a_fold_feeds_itself():
    program = lower(projected_rnn())
    names = [op.name for op in program.ops]
    feeds = {(names[a], names[b]) for a, b in zip(*np.nonzero(op_feeds(program)))}
    assert feeds == {("project", "concat"), ("concat", "cell"), ("cell", "concat")}


def test_an_op_fed_only_from_outside_the_recursion_runs_before_the_loop():
    program = lower(projected_rnn())
    names = [op.name for op in program.ops]
    by_types = Layout.build(program.ops, program.value_types)
    by_flow = Layout.build(program.ops, program.value_types, op_feeds(program))
    assert [names[o] for o in by_types.loop_ops] == ["project", "concat", "cell"]
    assert [names[o] for o in by_flow.head_ops] == ["project"]
    assert [names[o] for o in by_flow.loop_ops] == ["concat", "cell"]
    assert Compiler.create(projected_rnn()).executor.layout.head_ops == by_flow.head_ops


class Twice(td.Map):
    """Feeds each element's output back into the element block."""

    def evaluate(self, ctx, x):
        elem = self.element_block
        return [elem.eval_in(ctx, elem.eval_in(ctx, item)) for item in x]


class DeclaredTwice(Twice):
    def dataflow(self):
        elem = self.element_block
        return td.DataFlow({elem: [td.DataFlow.INPUT, elem], td.DataFlow.OUTPUT: [elem]})


def test_a_block_that_evaluates_its_own_way_without_declaring_its_flow_is_refused():
    with pytest.raises(TypeError, match=r"Pipe\[1\] > Twice: Twice has children but does "
                                        r"not declare its data flow: override dataflow\(\)"):
        Compiler.create(td.Map(td.Vector(3)) >> Twice(td.FC(3)))


def test_a_declared_flow_is_the_one_the_compiler_uses():
    twice = lower(td.Map(td.Vector(3)) >> DeclaredTwice(td.FC(3)))
    once = lower(td.Map(td.Vector(3)) >> td.Map(td.FC(3)))
    assert op_feeds(twice).tolist() == [[True]]
    assert op_feeds(once).tolist() == [[False]]


def test_a_block_evaluating_by_the_deprecated_name_gets_the_rule_that_is_always_correct():
    with pytest.warns(DeprecationWarning, match="OldTwice overrides _evaluate"):
        class OldTwice(td.Map):
            def _evaluate(self, ctx, x):
                elem = self.element_block
                return [elem._eval(ctx, elem._eval(ctx, item)) for item in x]

    program = lower(td.Map(td.Vector(3)) >> OldTwice(td.FC(3)))
    assert op_feeds(program).tolist() == [[True]]
    assert Compiler.create(td.Map(td.Vector(3)) >> OldTwice(td.FC(3))).executor.layout.loop_ops


class Scale(td.Block):
    """A leaf with an op and no declared flow: its op reads its input."""

    def __init__(self):
        vec = td.TensorType((3,))
        super().__init__(input_type=vec, output_type=vec)
        self.op = td.Op("scale", lambda x: [2.0 * x], [vec], [vec])

    def ops(self):
        return [self.op]

    def evaluate(self, ctx, x):
        return ctx.op(self.op, [x])[0]


def test_a_leaf_that_declares_nothing_gets_the_leaf_rule_and_runs_before_the_loop():
    program = lower(td.Map(td.Vector(3) >> Scale()) >> td.Sum())
    names = [op.name for op in program.ops]
    feeds = {(names[a], names[b]) for a, b in zip(*np.nonzero(op_feeds(program)))}
    assert feeds == {("scale", "add"), ("add", "add")}
    layout = Layout.build(program.ops, program.value_types, op_feeds(program))
    assert [names[o] for o in layout.head_ops] == ["scale"]


def test_a_user_block_with_children_that_declares_its_flow_runs_before_the_loop():
    case = models.make_user_block_with_children()
    program = lower(case.block)
    layout = Layout.build(program.ops, program.value_types, op_feeds(program))
    head = [program.ops[o] for o in layout.head_ops]
    loop = [program.ops[o] for o in layout.loop_ops]
    # the Residual over the elements (its FC and its add) runs before the loop,
    # the one in the Fold's step in it
    assert sum(op.name == "residual_add" for op in head) == 1
    assert sum(op.name == "residual_add" for op in loop) == 1


def test_a_declaration_naming_a_part_the_block_lacks_is_refused():
    stranger = td.Scalar()

    class Wrong(Scale):
        def dataflow(self):
            return td.DataFlow({td.DataFlow.OUTPUT: [stranger]})

    with pytest.raises(ValueError, match=r"Wrong: its dataflow\(\) names <td.Scalar"):
        op_feeds(lower(td.Vector(3) >> Wrong()))


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_layout_that_misses_a_feed_is_an_engine_error_not_a_wrong_result(scheduler):
    program = lower(projected_rnn())
    wrong = op_feeds(program)
    wrong[:, :] = False  # claims no op feeds another: everything runs before the loop
    planner = Planner(Layout.build(program.ops, program.value_types, wrong), scheduler)
    example = expand(program, [[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]])
    graph, record = example.graph, example.plan_record(program.root.output_type)
    with pytest.raises(EngineError, match="'concat' reads a value computed after it"):
        planner.plan([record], [graph.constants])
    with pytest.raises(EngineError, match="'concat' reads a value computed after it"):
        planner.feed(graph, SCHEDULERS[scheduler](graph), example.result_values(
            program.root.output_type))
    right = Planner(Layout.build(program.ops, program.value_types, op_feeds(program)),
                    scheduler)
    right.plan([record], [graph.constants])
    right.feed(graph, SCHEDULERS[scheduler](graph), example.result_values(
        program.root.output_type))
