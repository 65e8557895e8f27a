"""`Model` holds the Keras hooks; its collaborators hold the rest, behind public names.

A newcomer should find each concern of `Model` in one place: the Keras class itself
stays a page of hooks (at most `MAX_METHODS` of them), feeding lives in
`compiler.feeding.model_feed`, loss and metrics in `compiler.training.metrics`, the
traced steps in `compiler.training.tracing`, writing in `compiler.saving`; and none
of the modules on the training side reads another module's private names.
"""

from __future__ import annotations

import ast
import os

import pytest

from tests.test_layering import ROOT, python_files
from tests.test_private_names import defined_names

MAX_METHODS = 30
# the training side: Model, its collaborators, the feeding, the strategy's steps
TRAINING_SIDE = [os.path.join(ROOT, "compiler", "model.py"),
                 os.path.join(ROOT, "compiler", "compiler.py"),
                 *python_files(os.path.join("compiler", "distribute"),
                               os.path.join("compiler", "feeding"),
                               os.path.join("compiler", "training"))]


def _tree(path: str) -> ast.Module:
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def methods_of(tree: ast.Module, name: str) -> list[str]:
    """The `def`s in the body of class `name` (properties and setters included)."""
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    return [n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def private_reads(tree: ast.Module) -> list[str]:
    """`x._name` with x not `self`/`cls` and `_name` defined nowhere in the module: a
    read of another module's private name."""
    defined = defined_names(tree)
    return [f"{n.lineno}: {ast.unparse(n)}" for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and n.attr.startswith("_")
            and not n.attr.startswith("__") and n.attr not in defined
            and not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"))]


def test_model_keeps_at_most_thirty_methods():
    methods = methods_of(_tree(os.path.join(ROOT, "compiler", "model.py")), "Model")
    assert len(methods) <= MAX_METHODS, methods
    for hook in ("fit", "evaluate", "predict", "train_step", "test_step", "predict_step",
                 "get_config", "from_config", "save", "export", "make_train_function"):
        assert hook in methods


def test_the_method_count_counts_properties_and_setters():
    tree = ast.parse("class Model:\n    @property\n    def a(self): pass\n"
                     "    @a.setter\n    def a(self, v): pass\n    def b(self): pass\n"
                     "    x = 1\n")
    assert methods_of(tree, "Model") == ["a", "a", "b"]


def test_the_training_side_reads_no_private_name_of_another_module():
    found = {os.path.relpath(p, ROOT): hits for p in TRAINING_SIDE
             if (hits := private_reads(_tree(p)))}
    assert found == {}
    assert private_reads(ast.parse("model._forward(x)\nself._mine\n")) == [
        "1: model._forward"]


@pytest.mark.parametrize("module, name", [
    ("refold.compiler.feeding.model_feed", "ModelFeed"),
    ("refold.compiler.training.metrics", "LossAndMetrics"),
    ("refold.compiler.training.tracing", "StepTracer"),
    ("refold.compiler.saving", "ModelFiles"),
])
def test_each_collaborator_and_its_public_methods_say_what_they_are(module, name):
    import importlib
    import inspect
    cls = getattr(importlib.import_module(module), name)
    assert cls.__doc__ and cls.__doc__.strip()
    public = [m for m, f in vars(cls).items() if inspect.isfunction(f) and not m.startswith("_")]
    assert public and all(getattr(cls, m).__doc__ for m in public), public


def test_a_models_collaborators_are_its_own():
    import refold as td
    from refold.compiler import Model
    model = Model(td.Map(td.Scalar() >> td.Function(lambda x: x[:, None])) >> td.Sum())
    assert model.feed.model is model and model.tracer.model is model
    assert model.loss_and_metrics.model is model and model.files.model is model
    assert model.feed.pipeline is model.pipeline
    assert model.output_type_id is not None
