"""The pure decision core: plain functions over immutable snapshots, no I/O, time injected.

- ``snapshot``: resources in milli-units and the immutable inputs (nodes, queue, in-flight runs).
- ``admission``: queue order and which waiting ScavengerJobs start now, on which nodes.
- ``priority``: running priority inside a checkpoint period and the PriorityClass band.

Import the submodules directly; this package deliberately re-exports nothing, so that
``gang.placement`` (which ``admission`` uses) can import ``snapshot`` without an import cycle.
"""
