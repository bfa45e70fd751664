# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the binding's tests."""
import pytest

import normkernels as nk


@pytest.fixture(params=nk.available_isas())
def each_isa(request):
    nk.set_isa(request.param)
    assert nk.isa() == request.param
    yield request.param
    nk.set_isa(None)
