"""Simulators that know nothing of the closed forms: they train and report what they see,
in the same :class:`~oodcalc.report.Report` schema as the theory.

(a) :func:`simulate_population`: population GD on the full Q with explicit vectors;
(b) :func:`simulate_prompts`: GD on sampled prompts of N tokens, the actual softmax.
"""

from .population import simulate_population
from .prompts import simulate_prompts

__all__ = ["simulate_population", "simulate_prompts"]
