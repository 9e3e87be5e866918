"""Compatibility names of the original runtime: ``from reactor_runtime.distributed import DistributedWorker``.

The worker side only: the application half (``ReactorApp``, ``DistributedRunner``) is TypeScript
in this framework (``@reactor/runtime``, ``@reactor/distributed``).
"""
