"""The paper's BERT experiments on real text, with a real pretrained encoder.

Task: binary sentiment of drug reviews; source domain = contraception reviews. A frozen
MiniLM computes hidden states up to a cut (cached once); the layers above the cut and a
linear head are fine-tuned on the source (repeated stratified k-fold cross-validation,
one repetition per seed). On each held-out fold:

- **rotation**: pairs of hidden dimensions at the cut are turned by θ ∈ [0, π] (scenario 1:
  large with small probe-weight difference; scenario 2: small with small; all: every
  dimension, so cos(h, Rh) = cos θ = γ for every representation h); OOD cross-entropy
  against θ, beside the theory's OOD error for the rotation geometry (γ = cos θ, K = 2)
  and for the real geometry (the class means before and after the rotation);
- **natural shift**: each fold's model is evaluated on the other domains; the loss is set
  against the cosine of the domain's mean representation to the source's, the principal
  angles between their class-mean subspaces, and the theory's OOD error for V, U the
  class means (``geometry.from_arrays(V, U)``, as ``--features/--ood``), beside the same
  theory value between two random halves of the source (the split-source null);
- **forgetting**: the trained model is fine-tuned further on rotated source
  representations (θ = π/2, 3π/4, π; all dimensions) or on a target domain, and the
  change of the held-out source loss is F = L_source(after) − L_source(before).

Intervals are 95 % percentile bootstraps over reviews (each review's loss averaged over
seeds first). Every number is a function of the config, the seeds and the files' hashes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .. import paper
from ..errors import InputError
from ..geometry import rotation as rotation_geometry
from ..depth.statistics import VERDICT_SEEDS
from ..setting import Protocol
from .data import SOURCE, Review, counts
from .encoder import Encoder, hidden_states
from .fits import (FAMILIES, FINETUNED, FORGET_THETAS, THEORY_COLUMNS, SourceTheory,  # noqa: F401
                   class_geometry, class_means, cosine, lowdin, stratified_folds, theory_for,
                   theory_ood_error, theory_raw, theory_rotation_F, uniform_error, versions)
from .shared import THEORY_RULES, interval, real_protocol, resampled_means, unit_columns
from .top import Training

__all__ = [
    "Config", "DOUBLE_PEAK", "FAMILIES", "FINETUNED", "FORGET_THETAS", "Progress", "QUICK",
    "SourceTheory", "THEORY_COLUMNS", "THEORY_RULES", "VERSION", "Z95", "Z_POWER",
    "assemble", "beside_paper", "class_geometry", "class_means", "cosine", "double_peak",
    "halves", "interval", "local_maxima", "lowdin", "ood_before_after", "permutation_tests",
    "power", "rank_correlations", "real_protocol", "relabelled", "resampled_means",
    "row_theory", "run", "runs_counted", "shape", "share", "shift_row", "spearman",
    "split_null", "stratified_folds", "t_interval", "theory_for", "theory_ood_error",
    "theory_raw", "theory_rotation_F", "too_few_seeds", "uniform_error", "unit_columns",
    "versions"
]


#: Bumped whenever a change to the code changes the numbers of a run; every result records
#: it (``parameters.version``), and the docs' saved run must carry the current one.
#: 2: fine-tunings moving one part alone (attention block, head, W_Q·W_K, the rest of the
#: block), scenarios ranked by the trained head, the double-peak test and the power of
#: each contrast; --ft-steps, --eps, --layer.
#: 3: the theory columns read the class means as they are (each normalised to unit norm,
#: not orthogonalised: the Gram dynamics) under a stopping rule relative to their geometry
#: (``Config.theory_rule``), the orthonormalised column beside them; the split-source
#: null; the rank correlations over the target domains only.
VERSION = 3


@dataclass(frozen=True)
class Config:
    seeds: int = 5
    folds: int = 5
    steps: int = 24                  # θ grid: steps + 1 points over [0, π]
    pairs: int = 32                  # dimension pairs per scenario (64 of 384 dimensions)
    layer: int = 5                   # cut: hidden_states[layer] cached; layer's attention
                                     # block trained (its feed-forward and the layers above
                                     # are not used)
    max_len: int = 128               # tokens per review (truncation)
    training: Training = Training(epochs=3, lr=5e-5)
    finetune: Training = Training(epochs=1, lr=1e-4)
    bootstrap: int = 2000
    threads: int = 1                 # torch threads (1: fastest on a shared machine, and
                                     # sums in one order whatever the core count)
    source: str = SOURCE
    protocol: Protocol = field(default_factory=Protocol)   # the theory's ε, η
    theory_rule: str = "relative"    # THEORY_RULES: ε, η for the raw class means
    permutations: int = 199          # draws of each permutation test of the shift's theory
    arms: tuple = ()                 # intervention arms of the forgetting fine-tunes
                                     # (oodcalc.real.arms; plain first), () = none

    def check(self) -> "Config":
        if self.theory_rule not in THEORY_RULES:
            raise InputError("theory_rule", self.theory_rule,
                             f"expected one of {', '.join(THEORY_RULES)}")
        for name, value, low in (("--seeds", self.seeds, 1), ("--folds", self.folds, 2),
                                 ("--steps", self.steps, 2), ("--threads", self.threads, 1),
                                 ("permutations", self.permutations, 1)):
            if value < low:
                raise InputError(name, value, f"expected an integer >= {low}")
        if self.arms and not self.arms[0].plain:
            raise InputError("arms", ", ".join(a.label for a in self.arms),
                             "expected plain first (every contrast is against it)")
        if self.steps % 4:
            raise InputError("--steps", self.steps, "expected a multiple of 4, so that "
                             "θ = π/4, π/2 and 3π/4 lie on the grid")
        return self

    def describe(self) -> dict[str, Any]:
        return {"seeds": self.seeds, "folds": self.folds, "steps": self.steps,
                "pairs": self.pairs, "layer": self.layer, "max_len": self.max_len,
                "source": self.source, "bootstrap": self.bootstrap, "threads": self.threads,
                "training": self.training.describe(), "finetune": self.finetune.describe(),
                "theory_protocol": self.protocol.describe(),
                "theory_rule": self.theory_rule, "permutations": self.permutations,
                "version": VERSION,
                # only when arms run: a plain run's parameters stay as they were
                **({"arms": [a.describe() for a in self.arms]} if self.arms else {})}


#: ``--quick``: the same pipeline, smaller (one CV repetition of 3 folds, 12 θ steps).
QUICK = Config(seeds=1, folds=3, steps=12, bootstrap=1000, permutations=99)


class Progress:
    """What the experiment reports while it runs (the CLI draws a bar on stderr)."""

    def stage(self, name: str, total: int) -> None: ...

    def advance(self, n: int = 1) -> None: ...

    def note(self, text: str) -> None: ...


# --- statistics -----------------------------------------------------------------------

# --- theory on real representations -----------------------------------------------------

# --- the experiment ---------------------------------------------------------------------

def run(encoder: Encoder, reviews: Sequence[Review], data_sha256: str, config: Config,
        cache_dir=None, progress: Progress | None = None, *, task_cache: bool = True,
        client=None, workers: int = 1) -> dict[str, Any]:
    """Everything: returns a JSON-ready dict (parameters, rotation, shift, forgetting,
    paper figures beside ours). Each (seed, fold) fit is a task (oodcalc.real.tasks):
    with ``cache_dir`` (and ``task_cache``) the finished ones are cached there and a
    rerun computes only the rest; ``workers`` local processes, or ``client`` (a
    dask.distributed.Client) on its cluster, run them. The result is the same in every
    case."""
    import torch
    config = config.check()
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InputError("workers", workers, "expected an integer >= 1")
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        return _run(encoder, reviews, data_sha256, config, cache_dir, progress, task_cache,
                    client, workers)
    finally:
        torch.set_num_threads(threads)


def _run(encoder: Encoder, reviews: Sequence[Review], data_sha256: str, config: Config,
         cache_dir, progress: Progress | None, task_cache: bool = True,
         client=None, workers: int = 1) -> dict[str, Any]:
    from .tasks import Shared, collect, condition_names, task_parameters, targets_of
    from .tasks import task_cache as open_task_cache
    progress = progress or Progress()
    texts = [r.text for r in reviews]
    labels = np.array([r.label for r in reviews], dtype=np.int64)
    domains = np.array([r.domain for r in reviews])
    src = np.flatnonzero(domains == config.source)
    if len(src) < 2 * config.folds or len(np.unique(labels[src])) < 2:
        raise InputError("source", config.source, f"needs both labels and at least "
                         f"{2 * config.folds} reviews for {config.folds} folds")
    targets = targets_of(domains, config.source)
    # refused (a file, a FIFO at the entry) before the frozen layers run
    cache = open_task_cache(cache_dir, task_cache)

    progress.stage("hidden states (frozen layers)", len(texts))
    hidden, from_cache = hidden_states(encoder, texts, data_sha256, layer=config.layer,
                                       max_len=config.max_len, cache_dir=cache_dir,
                                       progress=progress.advance)
    progress.note("hidden states " + ("read from the cache" if from_cache else
                                      "computed and cached" if cache_dir else "computed"))
    shared = Shared.of(encoder, hidden, labels, domains)
    pooled = shared.pooled

    thetas = np.linspace(0.0, math.pi, config.steps + 1)
    S, n_src = config.seeds, len(src)
    forget_names = condition_names(targets)
    per_fold = 2 + len(forget_names) * (1 + len(config.arms))
    progress.stage("fine-tuning and evaluating", S * config.folds * per_fold)
    fits, read = collect(shared, config,
                         lambda s, f: task_parameters(config, data_sha256, encoder,
                                                      hidden.key, s, f),
                         cache, client, progress, workers)
    if read:
        progress.note(f"{read} of {S * config.folds} fits read from the task cache")
    if cache.rejected:
        progress.note(f"{cache.rejected} damaged or foreign task-cache "
                      f"entr{'ies' if cache.rejected > 1 else 'y'} recomputed")
    (rot, gamma_eff, theory_real, tgt_idx, shift, forget, forget_ood, theory_forget_real,
     arm_runs) = assemble(fits, config, domains, n_src, targets)

    rng = np.random.default_rng(12345)
    B = config.bootstrap
    result: dict[str, Any] = {
        "parameters": {**config.describe(), "model": encoder.name,
                       "model_sha256": encoder.identity, "data_sha256": data_sha256,
                       "cache_key": hidden.key, "hidden_size": encoder.hidden,
                       "layers": encoder.num_layers, "seed_list": list(range(S)),
                       "versions": versions()},
        "data": counts(reviews),
    }

    # rotation
    theory_rot = [theory_ood_error(rotation_geometry(t, 2).M, config.protocol) for t in thetas]
    fams = {}
    for fam in FAMILIES:
        per_ex = rot[fam].mean(axis=0)            # (θ, n_src): average over seeds
        curve = [interval(per_ex[t], rng, B) for t in range(len(thetas))]
        fams[fam] = {"loss": curve,
                     "seed_sd": rot[fam].mean(axis=2).std(axis=0, ddof=1).tolist() if S > 1
                     else None,
                     "gamma_eff": gamma_eff[fam].mean(axis=0).tolist(),
                     **{f"theory_{col}": theory_real[fam][col].mean(axis=0).tolist()
                        for col in THEORY_COLUMNS},
                     "shape": shape(rot[fam], thetas, rng, B)}
    result["rotation"] = {"theta": thetas.tolist(), "gamma": np.cos(thetas).tolist(),
                          "theory_rotation": theory_rot,
                          "families": fams}

    # natural shift
    source_loss = rot["all"][:, 0].mean(axis=0)
    rows = [shift_row(config.source, pooled, labels, domains, config.source, source_loss,
                      src, rng, B, config)]
    rows += [shift_row(d, pooled, labels, domains, config.source, shift[d].mean(axis=0),
                       tgt_idx[d], rng, B, config) for d in targets]
    result["shift"] = {"rows": rows, "null": split_null(pooled, labels, domains, config, rows),
                       "permutation": permutation_tests(pooled, labels, domains, config, rows),
                       "rank_correlations": rank_correlations(rows[1:])}

    # forgetting
    frows = []
    def measured(cond: str) -> dict[str, Any]:
        """F with everything fine-tuned, and with one part moving alone (paired: the same
        reviews, folds and batches), each with the new task's own loss before and after."""
        both = forget[cond]["both"].mean(axis=0)
        return {"F": interval(both, rng, B), "F_runs": runs_counted(forget[cond]["both"]),
                **ood_before_after(forget_ood[cond]["both"]),
                "by_part": {part: {"F": interval(forget[cond][part].mean(axis=0), rng, B),
                                   "F_runs": runs_counted(forget[cond][part]),
                                   "share": share(forget[cond][part].mean(axis=0), both),
                                   **ood_before_after(forget_ood[cond][part])}
                            for part in FINETUNED if part != "both"}}

    for (name, theta), cond in zip(FORGET_THETAS, forget_names):
        frows.append({"condition": cond, "theta": theta, "gamma": math.cos(theta),
                      **measured(cond),
                      "theory_F_rotation": theory_rotation_F(theta, config.protocol),
                      "theory_F_raw": float(np.mean(theory_forget_real[name]["raw"])),
                      "theory_F_orthonormalised":
                          float(np.mean(theory_forget_real[name]["orthonormalised"]))})
    for d, row in zip(targets, rows[1:]):
        cond = f"domain: {d}"
        frows.append({"condition": cond, "theta": None, "gamma": None, **measured(cond),
                      "theory_F_rotation": None, "theory_F_raw": row["theory_raw"]["F"],
                      "theory_F_orthonormalised": row["theory_orthonormalised"]["F"]})
    result["forgetting"] = frows
    if arm_runs is not None:
        result["arms"] = arm_runs.summary(np.random.default_rng([12345, 31]), B)
    result["paper"] = beside_paper(result)
    return result


def assemble(fits: dict[tuple[int, int], dict[str, Any]], config: Config,
             domains: np.ndarray, n_src: int, targets: list[str]) -> tuple:
    """The fits' results (oodcalc.real.tasks.fold_task, keyed (seed, fold)) in the
    experiment's arrays, in (seed, fold) order whatever order they finished in."""
    from .tasks import condition_names
    S, T = config.seeds, config.steps + 1
    names = condition_names(targets)
    rot = {f: np.zeros((S, T, n_src)) for f in FAMILIES}
    gamma_eff = {f: np.zeros((S * config.folds, T)) for f in FAMILIES}
    # the theory at the real geometry, per fit and θ: SourceTheory.ood's columns
    theory_real = {f: {col: np.zeros((S * config.folds, T)) for col in THEORY_COLUMNS}
                   for f in FAMILIES}
    tgt_idx = {d: np.flatnonzero(domains == d) for d in targets}
    shift = {d: np.zeros((S, len(i))) for d, i in tgt_idx.items()}
    forget = {c: {part: np.zeros((S, n_src)) for part in FINETUNED} for c in names}
    # the fine-tuning task's own held-out loss before and after, one mean per fit
    forget_ood = {c: {part: [] for part in FINETUNED} for c in names}
    theory_forget_real = {name: {"raw": [], "orthonormalised": []} for name, _ in FORGET_THETAS}
    arm_runs = None
    if config.arms:
        from .arms import ArmRuns
        arm_runs = ArmRuns(config.arms, names, S, n_src)
    fit = 0
    for s in range(S):
        for f in range(config.folds):
            r = fits[(s, f)]
            test_pos = np.array(r["test_pos"], dtype=np.int64)
            for fam in FAMILIES:
                for t, row in enumerate(r["rot"][fam]):
                    rot[fam][s, t, test_pos] = row
                gamma_eff[fam][fit] = r["gamma_eff"][fam]
                for col in THEORY_COLUMNS:
                    theory_real[fam][col][fit] = r["theory_real"][fam][col]
            for d in targets:
                shift[d][s] += np.array(r["shift"][d], dtype=np.float64) / config.folds
            for name, _ in FORGET_THETAS:
                for col in ("raw", "orthonormalised"):
                    theory_forget_real[name][col].append(r["theory_forget_real"][name][col])
            for c in names:
                for part in FINETUNED:
                    forget[c][part][s, test_pos] = r["forget"][c][part]
                    forget_ood[c][part].append(tuple(r["forget_ood"][c][part]))
                if arm_runs is not None:
                    for arm, got in zip(config.arms, r["arms"][c]):
                        arm_runs.F[c][arm][s, test_pos] = got["F"]
                        arm_runs.fits[c][arm].append(got["fit"])
                        arm_runs.theory[c][arm].append(tuple(got["theory"]))
            fit += 1
    return (rot, gamma_eff, theory_real, tgt_idx, shift, forget, forget_ood,
            theory_forget_real, arm_runs)


def ood_before_after(pairs: list[tuple[float, float]]) -> dict[str, float]:
    before, after = np.mean(pairs, axis=0)
    return {"ood_before": float(before), "ood_after": float(after)}


def share(part: np.ndarray, whole: np.ndarray) -> float | None:
    """The part's F as a fraction of the whole's (mean over reviews); None when the whole
    is too small to divide by (|F| < 1e-3 nats)."""
    total = float(whole.mean())
    return None if abs(total) < 1e-3 else float(part.mean()) / total


#: Two-sided 95 % and 80 % power: z_0.975 + z_0.8.
Z95, Z_POWER = 1.959963984540054, 0.8416212335729143


def power(per_seed: np.ndarray) -> dict[str, Any]:
    """How well a contrast is resolved, and what would resolve it.

    ``per_seed`` is (seeds, reviews): the contrast of each review in each seed's
    cross-validation. A review's value has a part of its own (spread σ_r² between
    reviews) and a part of the run that predicted it (the fold's model and rotation pairs,
    shared by a fifth of the reviews, and noise of its own). The seed-averaged mean over
    reviews then has variance σ_r²/n + τ²/S, where τ² is the variance of one seed's mean
    over reviews (every review moves with it), estimated from the seeds' means; σ_r² is
    the between-review variance less its seed noise (moments). Returned: both parts, the
    standard error, a normal 95 % interval, the power of a two-sided 5 % test if the true
    contrast equalled the estimate, the seeds that would give it 80 % power (None when the
    reviews' own spread forbids it whatever the seeds, or when one seed leaves τ² unknown)
    and the reviews that would at the seeds run (None when the seeds' part alone forbids
    it). More reviews would also mean more training data per fold: a planning figure."""
    d = np.asarray(per_seed, dtype=np.float64)
    S, n = d.shape
    effect = float(d.mean())
    between = float(d.mean(axis=0).var(ddof=1))               # reviews, seed-averaged
    if S > 1:
        within = float(d.var(axis=0, ddof=1).mean())           # one review across seeds
        run_var = float(d.mean(axis=1).var(ddof=1))           # τ²: one seed's mean
        review_var = max(0.0, between - within / S)
        se = math.sqrt(review_var / n + run_var / S)
    else:                          # one seed: the runs' share cannot be told apart
        run_var, review_var, se = None, between, math.sqrt(between / n)
    from statistics import NormalDist
    cdf = NormalDist().cdf
    if se > 0:
        z = abs(effect) / se
        achieved = cdf(z - Z95) + cdf(-z - Z95)
    else:
        achieved = 1.0 if effect else 0.0
    target = (abs(effect) / (Z95 + Z_POWER)) ** 2        # the variance 80 % power needs
    seeds = reviews = None
    if effect and run_var is not None:
        if review_var / n < target:
            seeds = max(1, math.ceil(run_var / (target - review_var / n)))
        if run_var / S < target:
            reviews = max(2, math.ceil(review_var / (target - run_var / S)))
    return {"effect": effect, "se": se, "lo": effect - Z95 * se, "hi": effect + Z95 * se,
            "review_var": review_var, "run_var": run_var, "power": achieved,
            "seeds_for_80": seeds, "reviews_for_80": reviews, "seeds": S, "reviews": n}


#: The double-peak test (fixed in the code after the first full run had been seen, before
#: the full run of version 2; so not pre-registered, a re-test of a pattern seen): two
#: interior peaks, at π/4 and 3π/4, each above both its neighbours on the grid
#: {0, π/4, π/2, 3π/4, π}. All four paired contrasts must have a 95 % interval above 0
#: (an intersection-union test: its level is at most that of each contrast). The
#: intervals are normal ones with the standard error of :func:`power`, which counts the
#: runs' share of the variance (a bootstrap over reviews alone would not).
DOUBLE_PEAK = (("CE(π/4) − CE(0)", 1, 0), ("CE(π/4) − CE(π/2)", 1, 2),
               ("CE(3π/4) − CE(π/2)", 3, 2), ("CE(3π/4) − CE(π)", 3, 4))


def double_peak(per_seed: np.ndarray) -> dict[str, Any]:
    """The double-peak test on a (seeds, θ, reviews) curve whose grid holds the quarters
    of π; each contrast with its interval and power."""
    quarters = [round(i * (per_seed.shape[1] - 1) / 4) for i in range(5)]
    contrasts = [{"contrast": name,
                  **power(per_seed[:, quarters[i]] - per_seed[:, quarters[j]])}
                 for name, i, j in DOUBLE_PEAK]
    resolved = all(c["lo"] > 0 for c in contrasts)
    weakest = min(contrasts, key=lambda c: c["lo"])
    verdict = ("double peak (every contrast above 0)" if resolved else
               f"no double peak: {weakest['contrast']} = {weakest['effect']:+.3f} "
               f"[{weakest['lo']:+.3f}, {weakest['hi']:+.3f}]")
    return {"resolved": resolved, "contrasts": contrasts, "weakest": weakest["contrast"],
            "verdict": too_few_seeds(per_seed.shape[0]) or verdict}


def runs_counted(per_seed: np.ndarray) -> dict[str, Any] | None:
    """Mean F over reviews with a 95 % interval whose standard error counts the runs
    (:func:`power`: each fold's model is shared by about a fifth of the reviews, so an
    interval over reviews alone is too narrow), and the per-seed means (over reviews) a
    reader needs to recompute it with ``review_var``. None from one seed: the runs' share
    of the variance is then unknown."""
    d = np.asarray(per_seed, dtype=np.float64)
    if d.shape[0] < 2:
        return None
    p = power(d)
    return {"mean": p["effect"], "lo": p["lo"], "hi": p["hi"], "se": p["se"],
            "review_var": p["review_var"], "run_var": p["run_var"], "reviews": p["reviews"],
            "per_seed": [float(x) for x in d.mean(axis=1)]}


def too_few_seeds(seeds: int) -> str | None:
    """The text that replaces a verdict drawn from fewer than VERDICT_SEEDS seeds."""
    return (f"no verdict from {seeds} seed{'s' * (seeds != 1)} (fewer than {VERDICT_SEEDS})"
            if seeds < VERDICT_SEEDS else None)


def shape(per_seed: np.ndarray, thetas: np.ndarray, rng: np.random.Generator,
          B: int) -> dict[str, Any]:
    """Fixed contrasts at θ = 0, π/2, π (paired over reviews): the theory's
    attention channel peaks at π/2 and is symmetric about it; a linear read-out of the
    rotated dimensions rises to π. ``per_seed`` is (seeds, θ, reviews); the three
    contrasts' intervals are bootstraps over reviews of the seed-averaged losses, and the
    change from 0 to π also carries :func:`power` (whose standard error counts the runs'
    share of the variance), as does every contrast of the double-peak test."""
    per_ex = per_seed.mean(axis=0)
    i0, ih, ipi = 0, len(thetas) // 2, len(thetas) - 1
    rise = interval(per_ex[ih] - per_ex[i0], rng, B)
    fall = interval(per_ex[ih] - per_ex[ipi], rng, B)
    total = interval(per_ex[ipi] - per_ex[i0], rng, B)
    mean_curve = per_ex.mean(axis=1)
    if rise["lo"] > 0 and fall["lo"] > 0:
        verdict = "non-monotone: rises to π/2, falls by π"
    elif total["lo"] > 0 and fall["hi"] < 0:
        verdict = "rises through π/2 to π"
    elif max(rise["hi"], total["hi"]) < 0:
        verdict = "falls"
    else:
        verdict = "no resolved change at π/2 or π"
    verdict = too_few_seeds(per_seed.shape[0]) or verdict
    return {"rise_0_to_half_pi": rise, "fall_half_pi_to_pi": fall,
            "change_0_to_pi": {**total, "power": power(per_seed[:, ipi] - per_seed[:, i0])},
            "argmax_theta": float(thetas[int(np.argmax(mean_curve))]),
            "local_maxima": local_maxima(mean_curve, thetas), "verdict": verdict,
            "double_peak": double_peak(per_seed)}


def local_maxima(curve: np.ndarray, thetas: np.ndarray) -> list[float]:
    """θ of interior points higher than both neighbours (of the mean curve; descriptive)."""
    return [float(thetas[i]) for i in range(1, len(curve) - 1)
            if curve[i] > curve[i - 1] and curve[i] > curve[i + 1]]


def shift_row(domain: str, pooled: np.ndarray, labels: np.ndarray, domains: np.ndarray,
              source: str, per_example: np.ndarray, idx: np.ndarray,
              rng: np.random.Generator, B: int, config: Config) -> dict[str, Any]:
    src = domains == source
    here = domains == domain
    y = labels[idx]
    classes = [per_example[y == c] for c in (0, 1) if (y == c).any()]
    # the class-balanced loss, and its bootstrap resampling reviews within each class
    resampled = np.mean([resampled_means(x, rng, B) for x in classes], axis=0)
    lo, hi = np.percentile(resampled, [2.5, 97.5])
    ms, md = class_means(pooled[src], labels[src]), class_means(pooled[here], labels[here])
    return {"domain": domain, "n": int(here.sum()), "positive": int(labels[here].sum()),
            "cos_mean": cosine(pooled[here].mean(0), pooled[src].mean(0)),
            "theory_raw": theory_raw(ms, md, config.protocol, config.theory_rule),
            "theory_raw_fixed_eps": theory_raw(ms, md, config.protocol, "absolute"),
            "theory_orthonormalised": theory_for(ms, md, config.protocol),
            "loss": interval(per_example, rng, B),
            "balanced_loss": float(np.mean([x.mean() for x in classes])),
            "balanced_interval": {"lo": float(lo), "hi": float(hi)}}


def row_theory(row: dict[str, Any], column: str) -> float:
    """A shift row's theory value in one of :data:`THEORY_COLUMNS`."""
    return {"raw": row["theory_raw"]["ood_loss"],
            "raw_vs_uniform": row["theory_raw"]["ood_vs_uniform"],
            "raw_fixed_eps": row["theory_raw_fixed_eps"]["ood_loss"],
            "orthonormalised": row["theory_orthonormalised"]["ood_loss"]}[column]


def t_interval(values) -> dict[str, Any]:
    """Mean and 95 % Student-t interval of independent draws (None with fewer than 2)."""
    x = np.asarray(values, dtype=np.float64)
    n, mean = len(x), float(x.mean())
    if n < 2:
        return {"mean": mean, "lo": None, "hi": None, "sd": None, "n": n}
    from scipy import stats
    sd = float(x.std(ddof=1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return {"mean": mean, "lo": mean - half, "hi": mean + half, "sd": sd, "n": n}


def halves(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random half of the positions, each class halved (the rest is the other half)."""
    mask = np.zeros(len(labels), dtype=bool)
    for c in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == c))
        mask[members[:len(members) // 2]] = True
    return mask


def split_null(pooled: np.ndarray, labels: np.ndarray, domains: np.ndarray, config: Config,
               rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The theory's value where there is no shift: the source's reviews split into two
    random halves (each class halved), V from the class means of one half and U from the
    other's, seeds × folds times (generator (seed, fold, 3)). No model is trained, so the
    splits are exchangeable draws; their mean has a Student-t interval (the null's level,
    given these reviews), and each domain's value (its shift row) is set against the
    draws: the share of them at or above it, (1 + #{null >= value}) / (1 + splits). Every
    per-split value is kept. The halves have 87 source reviews a side, the domains' rows
    174 and all of the domain's: the null is the noisier, so it errs towards calling a
    domain noise (:func:`permutation_tests` matches the sizes)."""
    src = np.flatnonzero(domains == config.source)
    y = labels[src]
    values: dict[str, list[float]] = {c: [] for c in THEORY_COLUMNS}
    splits = []
    for s in range(config.seeds):
        for f in range(config.folds):
            half = halves(y, np.random.default_rng([s, f, 3]))
            th = SourceTheory(class_means(pooled[src[half]], y[half]), config.protocol,
                              config.theory_rule)
            for c, e in th.ood(class_means(pooled[src[~half]], y[~half])).items():
                values[c].append(e)
            splits.append({"seed": s, "fold": f})
    summary = {}
    for c in THEORY_COLUMNS:
        null = np.array(values[c])
        summary[c] = {"null": t_interval(null), "null_max": float(null.max()),
                      "share_at_or_above": {
                          r["domain"]: float((1 + np.sum(null >= row_theory(r, c)))
                                             / (1 + len(null))) for r in rows[1:]}}
    return {"splits": splits, "values": values, "summary": summary}


def relabelled(first: np.ndarray, second: np.ndarray, labels: np.ndarray,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Positions of two groups pooled and dealt again at random within each class, each
    group keeping its count of every class (a permutation that keeps the label shift)."""
    a, b = [], []
    for c in (0, 1):
        x, y = first[labels[first] == c], second[labels[second] == c]
        pool = rng.permutation(np.concatenate([x, y]))
        a.append(pool[:len(x)])
        b.append(pool[len(x):])
    return np.concatenate(a), np.concatenate(b)


def permutation_tests(pooled: np.ndarray, labels: np.ndarray, domains: np.ndarray,
                      config: Config, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Is a domain's theory value beyond the noise, at its own sample sizes? The source's
    and the domain's reviews are pooled and dealt again within each class
    (:func:`relabelled`), ``config.permutations`` times, and the theory value recomputed:
    one-sided p = (1 + #{permuted >= observed}) / (1 + permutations). Does the theory order
    two domains beyond the noise? The two domains' reviews are dealt again the same way
    and the difference of their values (the source's class means fixed) recomputed:
    two-sided p on |difference|. Generators (domain index, permutation, 5) and (first,
    second, permutation, 6)."""
    src = np.flatnonzero(domains == config.source)
    targets = [r["domain"] for r in rows[1:]]
    idx = {d: np.flatnonzero(domains == d) for d in targets}
    P = config.permutations
    observed = {r["domain"]: {c: row_theory(r, c) for c in THEORY_COLUMNS} for r in rows[1:]}
    shift: dict[str, Any] = {}
    for i, d in enumerate(targets):
        drawn = {c: [] for c in THEORY_COLUMNS}
        for p in range(P):
            a, b = relabelled(src, idx[d], labels, np.random.default_rng([i, p, 5]))
            th = SourceTheory(class_means(pooled[a], labels[a]), config.protocol,
                              config.theory_rule)
            for c, e in th.ood(class_means(pooled[b], labels[b])).items():
                drawn[c].append(e)
        shift[d] = {c: {"observed": observed[d][c],
                        "p": float((1 + np.sum(np.array(drawn[c]) >= observed[d][c])) / (1 + P)),
                        "permuted_mean": float(np.mean(drawn[c]))} for c in THEORY_COLUMNS}
    source = SourceTheory(class_means(pooled[src], labels[src]), config.protocol,
                          config.theory_rule)
    pairs: dict[str, Any] = {}
    for i, d1 in enumerate(targets):
        for j in range(i + 1, len(targets)):
            d2 = targets[j]
            diffs = {c: [] for c in THEORY_COLUMNS}
            for p in range(P):
                a, b = relabelled(idx[d1], idx[d2], labels,
                                  np.random.default_rng([i, j, p, 6]))
                ea = source.ood(class_means(pooled[a], labels[a]))
                eb = source.ood(class_means(pooled[b], labels[b]))
                for c in THEORY_COLUMNS:
                    diffs[c].append(ea[c] - eb[c])
            pairs[f"{d1} − {d2}"] = {c: {
                "observed": observed[d1][c] - observed[d2][c],
                "p": float((1 + np.sum(np.abs(diffs[c]) >=
                                       abs(observed[d1][c] - observed[d2][c]))) / (1 + P))}
                for c in THEORY_COLUMNS}
    return {"permutations": P, "shift": shift, "pairs": pairs}


def spearman(x, y) -> float | None:
    """Rank correlation (no ties expected among a handful of domains); None when either
    side is constant."""
    rx, ry = (np.argsort(np.argsort(v)).astype(float) for v in (x, y))
    if rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def rank_correlations(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Spearman over the target domains (the source against itself is left out: its
    distance and theory value are 0 by construction and would buy the correlation a
    point), of the CE and the class-balanced CE with 1 − cosine and each theory column."""
    predictors = {"1 − cosine": [1 - r["cos_mean"] for r in rows],
                  **{c: [row_theory(r, c) for r in rows] for c in THEORY_COLUMNS}}
    measured = {"CE": [r["loss"]["mean"] for r in rows],
                "class-balanced CE": [r["balanced_loss"] for r in rows]}
    return {"domains": [r["domain"] for r in rows],
            **{m: {p: spearman(y, x) for p, x in predictors.items()}
               for m, y in measured.items()}}


def beside_paper(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The paper's BERT figures next to the matching measurement."""
    fam = result["rotation"]["families"]
    s1, s2 = fam["scenario 1"], fam["scenario 2"]
    shift_rows = result["shift"]["rows"]
    worst = max(shift_rows[1:], key=lambda r: r["loss"]["mean"]) if len(shift_rows) > 1 \
        else shift_rows[0]
    forget = {r["condition"]: r for r in result["forgetting"]}

    def ours(x):
        return {"value": x["mean"], "lo": x["lo"], "hi": x["hi"]}

    rows = [
        ("bert-rotation-scenario1-start", "scenario 1, θ = 0", ours(s1["loss"][0])),
        ("bert-rotation-scenario1-end", "scenario 1, θ = π", ours(s1["loss"][-1])),
        ("bert-rotation-scenario1-start", "scenario 1 shape", {"text": s1["shape"]["verdict"]}),
        ("bert-rotation-scenario2-shape", "scenario 2 shape", {"text": s2["shape"]["verdict"]}),
        ("bert-natural-shift-start", f"source ({shift_rows[0]['domain']})",
         ours(shift_rows[0]["loss"])),
        ("bert-natural-shift-end", f"highest-loss domain ({worst['domain']})",
         ours(worst["loss"])),
        ("bert-forgetting-theta=pi", "F, rotation θ = π", ours(forget["rotation θ = π"]["F"])),
        ("bert-forgetting-theta=pi/2", "F, rotation θ = π/2",
         ours(forget["rotation θ = π/2"]["F"])),
    ]
    out = []
    for fid, what, value in rows:
        fig = paper.figure(fid)
        out.append({"figure": fid, "paper": fig.printed, "paper_value": fig.value,
                    "paper_note": fig.note,
                    "paper_setting": f"{fig.setting.get('model', '')}, {fig.setting.get('data', '')}",
                    "source": fig.source, "ours": what, **value})
    return out
