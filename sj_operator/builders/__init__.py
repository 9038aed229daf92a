"""Pure builders of the objects the operator writes; they return plain dicts and call no API.

- ``job``: the ``batch/v1`` Job of one run (an Indexed Job for a gang, MPI-wired when asked);
- ``service``: the headless Service through which a gang's members find each other;
- ``budget``: the PodDisruptionBudget that protects a run past its protection level;
- ``mpi``: an MPI SJ's ssh Secret and hostfile ConfigMap (content from ``gang``);
- ``priority_classes``: the PriorityClass band SJ pods run in.

Everything an SJ owns carries its owner reference, so deleting the SJ removes everything.
"""
