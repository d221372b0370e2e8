"""The depth experiment's protocol: every choice in one record, with its defaults.

A :class:`DepthConfig` fixes everything a run depends on except the seed and γ; its
:meth:`~DepthConfig.describe` is what every result carries and what the cache is keyed by.
No torch here, so the CLI can validate options before importing it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from .. import estimates
from ..errors import ComputationError, InputError, param
from ..setting import check_positive
from .arms import Arm, check_replay_batch

__all__ = [
    "ARCHITECTURES", "CURVE_POINTS", "CURVE_SEEDS", "DEFAULT_LR", "DepthConfig",
    "LADDER_ARCHITECTURES", "MAX_LR", "MAX_PHASE_STEPS", "OPTIMIZERS", "PAPER_GAMMAS",
    "PAPER_LAYERS", "PROTOCOL_VERSION", "REACH", "canonical_gamma", "check_reach",
    "run_key", "theory_eta",
]


ARCHITECTURES = ("attention", "standard")
#: The ladder's two lowest rungs (docs/depth.md, "The ladder"): the theory's model itself and
#: that model with a learned read-out; not offered by ``reproduce depth``.
LADDER_ARCHITECTURES = ("theory", "readout")
OPTIMIZERS = ("sgd", "adam")
#: The paper's three γ values (γ1 = 1, γ2 = γ) and the depths it reports.
PAPER_GAMMAS = (-0.75, 0.0, 0.75)
PAPER_LAYERS = (1, 2, 3)
#: The γ-curve: CURVE_POINTS values evenly spaced over [-1, 1] (17 include -0.75, 0, 0.75),
#: over CURVE_SEEDS seeds (the table uses 10).
CURVE_POINTS = 17
CURVE_SEEDS = 5
#: Bumped whenever a change to the code changes the numbers (part of every cache key).
PROTOCOL_VERSION = 2   # 2: the stopping rule checked exactly at every step (1 screened it)
#: Step sizes when none is given: SGD takes the theory's η = 0.1 (oodcalc's default);
#: Adam takes PyTorch's default 1e-3, what a practitioner gets without tuning.
DEFAULT_LR = {"sgd": 0.1, "adam": 1e-3}
#: Most steps a fine-tuning may run (``ft_steps``, or ``max_steps`` under the rule): its
#: record keeps the source and the OOD loss at every step, at most ~2 × 51 bytes a step in
#: the cache's JSON, so 10^6 steps stay within its 128 MiB record cap (``cache.MAX_RECORD_BYTES``;
#: tests/test_hostile_runs.py checks it).
MAX_PHASE_STEPS = 1_000_000
#: Largest step size: the models' parameters are float32 (torch refuses a larger lr).
MAX_LR = 3.4e38


@dataclass(frozen=True)
class DepthConfig:
    """One architecture, optimizer and depth, and the protocol both phases follow.

    Fields (defaults in brackets): ``arch`` (attention), ``optimizer`` (sgd), ``layers`` (1),
    ``width`` (16 = 15 feature dimensions + 1 label slot), ``N`` (16 context tokens),
    ``batch`` (256 fresh prompts per step), ``eval_prompts`` (4096, fixed per seed, half
    with each query feature), ``eps`` (0.01: a phase stops at the first step where every
    e_k <= eps on the evaluation prompts), ``lr`` (:data:`DEFAULT_LR`), ``max_steps``
    (5,000 per phase), ``curve_prompts`` (the source-loss curve along fine-tuning is
    recorded on the first 512 evaluation prompts) and ``ft_steps`` (None: fine-tuning
    stops at the rule too; N: exactly N fine-tuning steps).
    """

    arch: str = "attention"
    optimizer: str = "sgd"
    layers: int = 1
    width: int = 16
    N: int = 16
    batch: int = 256
    eval_prompts: int = 4096
    eps: float = 0.01
    lr: float | None = None
    max_steps: int = 5_000
    curve_prompts: int = 512
    K: int = 2
    #: fine-tune exactly this many steps, no stopping rule (None: stop at the rule, as
    #: pretraining does); omitted from ``describe`` when None, so earlier cache keys hold
    ft_steps: int | None = None
    #: the intervention arm of the fine-tuning, an :class:`~oodcalc.depth.arms.Arm`; None
    #: is plain, omitted from ``describe`` so that plain keeps its cache keys and the
    #: record's runs
    arm: Arm | None = None

    def __post_init__(self) -> None:
        if self.arm is not None and not isinstance(self.arm, Arm):
            raise InputError("arm", self.arm, "expected an oodcalc.depth.arms.Arm")
        if self.arm is not None and self.arm.plain:
            object.__setattr__(self, "arm", None)
        if self.arch not in ARCHITECTURES + LADDER_ARCHITECTURES:
            raise InputError("arch", self.arch, "expected one of "
                             f"{', '.join(ARCHITECTURES + LADDER_ARCHITECTURES)}")
        if self.optimizer not in OPTIMIZERS:
            raise InputError("optimizer", self.optimizer,
                             f"expected one of {', '.join(OPTIMIZERS)}")
        for name, minimum in (("layers", 1), ("N", 1), ("batch", 1), ("max_steps", 1),
                              ("eval_prompts", 2), ("curve_prompts", 2)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise InputError(name, value, f"expected an integer >= {minimum}")
        if self.ft_steps is not None and (isinstance(self.ft_steps, bool) or not isinstance(
                self.ft_steps, int) or self.ft_steps < 1):
            raise InputError("ft_steps", self.ft_steps, "expected an integer >= 1 (or None: "
                             "fine-tune to the stopping rule)")
        for name in ("max_steps", "ft_steps"):
            value = getattr(self, name)
            if value is not None and value > MAX_PHASE_STEPS:
                raise InputError(param(f"DepthConfig.{name}"), value,
                                 f"at most {MAX_PHASE_STEPS:,} (a run's record keeps the source "
                                 "loss at every fine-tuning step)")
        if self.K != 2:
            raise InputError("K", self.K, "the depth experiment has K = 2 (γ1 = 1, γ2 = γ)")
        if self.width < self.K + 2:
            raise InputError("width", self.width,
                             f"expected an integer >= {self.K + 2} (features, a fresh "
                             "direction for u2 and the label slot)")
        if self.eval_prompts % self.K or self.curve_prompts % self.K:
            raise InputError("eval_prompts", self.eval_prompts,
                             "expected even sizes (half the prompts ask each feature)")
        if self.curve_prompts > self.eval_prompts:
            raise InputError("curve_prompts", self.curve_prompts,
                             f"expected at most eval_prompts = {self.eval_prompts}")
        object.__setattr__(self, "eps", check_positive(self.eps, "eps"))
        object.__setattr__(self, "lr", DEFAULT_LR[self.optimizer] if self.lr is None
                           else check_positive(self.lr, "lr"))
        if self.lr > MAX_LR:
            raise InputError(param("DepthConfig.lr"), f"{self.lr:g}",
                             f"at most {MAX_LR:g} (the models' parameters are float32)")
        check_replay_batch(self.arm, self.batch)
        check_reach(self)

    @property
    def features(self) -> int:
        """Feature dimensions of a token (the last coordinate is the label slot)."""
        return self.width - 1

    def with_(self, **changes: Any) -> "DepthConfig":
        return replace(self, **changes)

    def describe(self) -> dict[str, Any]:
        described = asdict(self)
        if self.ft_steps is None:
            del described["ft_steps"]
        if self.arm is None:
            del described["arm"]
        else:
            described["arm"] = self.arm.describe()
        return described

    def run_parameters(self, seed: int, gamma: float) -> dict[str, Any]:
        """Everything one run's numbers depend on (the cache key hashes this)."""
        import platform
        return {**self.describe(), "seed": int(seed), "gamma": canonical_gamma(gamma),
                "version": PROTOCOL_VERSION, "torch": torch_version(),
                "machine": platform.machine(), "threads": 1}


#: The record's T1 is 0.4-6 × the estimate (38 steps against 87: standard·Adam, 3 layers,
#: ε = 0.05), so a run is refused only where even the fastest would hit its cap.
REACH = 4


def theory_eta(config: DepthConfig) -> float:
    """The theory's step size that takes about as many steps as ``config``'s optimizer: SGD's
    own lr; Adam's scaled as its lr is from its default (at 1e-3 it takes about as many steps
    as SGD at 0.1: T1 82-132 against 143-230 in docs/depth.json, 2-3 layers at ε = 0.01)."""
    return DEFAULT_LR["sgd"] * config.lr / DEFAULT_LR[config.optimizer]


def check_reach(config: DepthConfig) -> None:
    """predict's rule for an explicit cap, with room for the models: refuse, before
    training, a pretraining whose estimate (the one-layer theory's gradient-flow T1 at ε) is
    over ``REACH`` × ``max_steps``: every run would stop at its cap (``--eps 1e-300``)."""
    eta = theory_eta(config)
    log_t1 = estimates.log_steps_from_margin(config.K, config.eps, eta, 0.0)
    estimate = estimates.exp_steps(log_t1)
    if estimate <= REACH * config.max_steps:
        return
    changes = []
    if 1.2 * estimate <= MAX_PHASE_STEPS:
        changes.append(f"{param('DepthConfig.max_steps')} to about {math.ceil(1.2 * estimate):,}")
    fit_eps = estimates.eps_for_steps(config.K, eta, config.max_steps)
    if fit_eps > config.eps and estimates.pretrain_steps(config.K, fit_eps, eta) <= \
            config.max_steps:
        changes.append(f"{param('DepthConfig.eps')} to about {fit_eps:.2g}")
    fit_lr = config.lr * estimate / config.max_steps        # the estimate goes as 1/η
    if fit_lr <= DEFAULT_LR[config.optimizer]:
        changes.append(f"{param('DepthConfig.lr')} to about {fit_lr:.2g}")
    if not changes:
        changes.append(param("DepthConfig.eps"))
    raise ComputationError(
        f"pretraining ({config.arch}, {config.optimizer}) would need about "
        f"{estimates.format_steps(log_t1)} steps to meet the stopping rule (the one-layer "
        f"theory's estimate at eps = {config.eps:g}, lr = {config.lr:g}), more than "
        f"{REACH} × max_steps = {config.max_steps:,}: every run would stop at its cap; raise "
        + " or ".join(changes))


def canonical_gamma(gamma: float) -> float:
    """γ as it enters keys and files: a finite number in [-1, 1], rounded to 12 decimals."""
    g = float(gamma)
    if not (math.isfinite(g) and -1.0 <= g <= 1.0):
        raise InputError("gamma", gamma, "each γ must lie in [-1, 1]")
    return round(g, 12) + 0.0   # + 0.0 turns -0.0 into 0.0


def run_key(parameters: dict[str, Any]) -> str:
    text = json.dumps(parameters, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def torch_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("torch")
    except PackageNotFoundError:
        return "missing"

