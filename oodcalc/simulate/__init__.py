"""Simulators that know nothing of the closed forms: they train and report what they see,
in the same :class:`~oodcalc.report.Report` schema as the theory."""

from .population import simulate_population

__all__ = ["simulate_population"]
