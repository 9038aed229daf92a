"""The write side of the decision loop: carrying a pass's decisions out against the API server.

- ``plan``: which decisions are written, in which order and lane (pure);
- ``ledger``: what this process wrote or launched that the watch does not show yet (read-your-writes);
- ``writer``: one SJ's step written out: its status, its Events, its actions;
- ``steering``: victim steering's writes, in the background;
- ``events``: the Event recorder;
- ``launcher``: the admitted SJs' runs, made in the background;
- ``gate``: whether the namespace takes a run (dry runs, quotas), and the SJs it held back;
- ``pool``: the worker pool they all run their API calls in.
"""
