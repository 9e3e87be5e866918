"""``reactor_runtime.distributed``: the module path the original runtime's workers import.

Re-exports :mod:`reactor_worker`, so a worker written for the original runtime
(``from reactor_runtime.distributed import DistributedWorker``) runs unchanged as a rank of a
TypeScript ``DistributedRunner``.
"""
from reactor_worker import (  # noqa: F401
    CancelledError,
    DistributedWorker,
    InjectedFaultError,
    UnsendableValueError,
    init_distributed,
)

__all__ = ["CancelledError", "DistributedWorker", "InjectedFaultError", "UnsendableValueError", "init_distributed"]
