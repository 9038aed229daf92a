"""What the benchmarks share, so that each script states only its workload and what it measures of it.

* ``results``: a result as data (command, commit, machine, figures and goals); ``report`` renders the page;
* ``progress``: timestamped progress lines, work done in parallel, waiting for a condition; ``stats``: percentiles;
* ``processes``: processes started beside a benchmark and stopped again, and their CPU and peak memory;
  ``profiling``: py-spy over a process;
* ``metrics``: a process's health and Prometheus metrics over HTTP, and the operator's read back as figures;
* ``kube``: the cluster through the kubernetes client (namespaces, CRDs, kwok nodes, PriorityClasses, watches);
  ``recorder``: when each SJ's Job and phase Running are first seen;
* ``scavenger``: the operator as a process of its own, leading or on standby; ``kueue``: Kueue's manager;
* ``preemption``: high-priority pods sent on a schedule, and the work their victims lost;
* ``scale_report``: what ``bench_scale`` keeps of a run and shows of it (its table, its figures and goals, its plot).
"""
