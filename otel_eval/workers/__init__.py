"""Evaluation in worker processes (``serve --workers N``): the engine's evaluate-and-store
step behind one interface, run in the main process (``stage.InProcess``) or in N processes
(``pool.WorkerPool``; ``child`` is what runs in each). Kept free of imports here: the
metrics module imports ``workers.metrics``.
"""
