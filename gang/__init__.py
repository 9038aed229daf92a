"""Gang mechanics, the layer below the operator: placing every pod of a gang at once on free node
capacity (``placement``), the stable names of its members (``hosts``), and MPI wiring (``ssh``,
``hostfile``, ``mpi`` and the shipped ``mpi-entrypoint.sh``).

Nothing here imports ``sj_operator``: the operator passes in plain values and wraps what this
package builds (a Secret's data, a hostfile, a wired Job) with its own object metadata.
"""
