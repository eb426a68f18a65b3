"""Where a reproduction's or a study's independent jobs run: ``local`` worker processes
(one GPU each where there are GPUs) or ``ray`` tasks on a Ray cluster.

The driver alone stores results; an executor only runs ``work(job)`` somewhere and hands
each job's :class:`~suite.results.TaskResult` back, so results equal a sequential run's
whatever the executor.
"""

EXECUTORS = ("local", "ray")
"""The executors ``--executor`` takes; ``local`` is the default."""
