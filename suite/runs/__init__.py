"""Run orchestration, above the tasks: one run (:mod:`suite.runs.single`) and one config
over several seeds (:mod:`suite.runs.multiseed`). The engine below knows nothing of tasks."""
