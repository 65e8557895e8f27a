from __future__ import annotations

import pytest

from tests.serving.exports import export_calculator


@pytest.fixture(scope="session")
def calculator(tmp_path_factory):
    """`(model, export path)` of the calculator's classifier."""
    path = tmp_path_factory.mktemp("serving") / "calculator"
    return export_calculator(path), str(path)
