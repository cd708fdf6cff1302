"""The transient table's measurements run their kernels on two intra-op threads."""

from __future__ import annotations

from typing import Any

import pytest
import torch


@pytest.fixture(autouse=True)
def two_threads() -> Any:
    """Two intra-op threads (the test session's processes take one, tests/conftest.py): the entries whose
    kernels keep per-thread buffers or take a serial path on one thread are measured on their parallel path."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)
