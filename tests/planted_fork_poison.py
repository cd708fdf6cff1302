"""Imported by a fork server's preload (``ForkPoisoningBackend``): the state a CUDA initialisation leaves.

After torch initialises CUDA in a process, ``torch.cuda._is_in_bad_fork()`` is true in each child it forks,
and torch refuses CUDA there.  A CPU machine has no CUDA to initialise, so this module sets the fork hook
torch's own would set."""

from __future__ import annotations

import os

import torch.cuda


def _child_is_in_bad_fork() -> bool:
    return os.getpid() != _PARENT


_PARENT = os.getpid()
torch.cuda._is_in_bad_fork = _child_is_in_bad_fork
