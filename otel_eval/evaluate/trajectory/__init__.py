"""Stage: trajectory. ``model.Trace`` -> ``steps.Trajectory`` (the normalized agent run).

``build.build_trajectory`` reads each span into a step with the span readers of
``otel_eval.evaluate.conventions``, then runs ``passes.PASSES`` over the steps, in that one
order, each pass with its precondition: nested calls merged, envelopes off, tool steps joined
to the LLM calls that asked for them (``links``), arguments and results settled
(``arguments``, ``envelopes``, ``shapes``), results looked up in later LLM inputs
(``responses``), calls and code actions no span ran rebuilt (``code_actions``,
``interpreters``, ``shell``), LLM calls priced (``prices``).
"""

from otel_eval.evaluate.trajectory.build import build_trajectory, is_run, tree_order

__all__ = ["build_trajectory", "is_run", "tree_order"]
