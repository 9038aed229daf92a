"""The pure decision core: plain functions over immutable values, no I/O, time injected.

- ``lifecycle``: the ScavengerJob state machine (what a run's outcome is, what to do about it);
  ``outcomes`` holds what it reads and decides, ``conditions`` the standard conditions it sets;
- ``queue``: queue order, waiting time and starvation;
- ``admission``: which waiting ScavengerJobs start now, on which nodes (with ``gang.placement``);
- ``priority``: running level inside a checkpoint period, victim steering, the PriorityClass band;
- ``snapshot``: the immutable inputs of admission (nodes, queue, runs in flight).

Import the submodules directly; this package re-exports nothing.
"""
