"""oodcalc: the theory of out-of-distribution in-context learning in softmax attention
(arXiv 2609.36448) as a calculator, a symbolic engine and a simulator."""

from .errors import ComputationError, InputError, OodcalcError
from .geometry import (Geometry, from_arrays, from_files, gram, mean_query, orthogonal,
                       overlap, parallel_shift, rotation)
from .prediction import expected_seconds, predict
from .continual import sequence
from .finetune.sequence import parallel_shifts, shifts_from_arrays
from .prescribe import advise
from .report import Report
from .setting import Protocol, Setting

from ._version import __version__

__all__ = [
    "ComputationError", "Geometry", "InputError", "OodcalcError", "Protocol", "Report",
    "Setting", "advise", "expected_seconds", "from_arrays", "from_files", "gram", "mean_query",
    "orthogonal", "overlap", "parallel_shift", "parallel_shifts", "predict", "rotation",
    "sequence", "shifts_from_arrays",
]
