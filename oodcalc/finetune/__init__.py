"""Fine-tuning interventions: replay, a pull toward the pretrained weights, projections
and query weights, as terms of one step on the OOD and source logits."""

from .engine import ENGINE, Run, finetune
from .terms import Fit, Pull, Recipe, Replay, Term, centre_cosines, column_errors, \
    errors_and_gradient, frozen_columns, loss_gradient, query_weights, recipe

__all__ = ["ENGINE", "Fit", "Pull", "Recipe", "Replay", "Run", "Term", "centre_cosines",
           "column_errors", "errors_and_gradient", "finetune", "frozen_columns",
           "loss_gradient", "query_weights", "recipe"]
