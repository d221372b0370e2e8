"""The intervention arms (issue 31; oodcalc.depth.arms) on the real-text forgetting
fine-tune: what each arm does to a fine-tuning step of the trained top (layer L's attention
block, mean pooling, the linear head; oodcalc.real.top), the theory's prediction for the
same intervention on the same geometry, and the matched-OOD-loss endpoint.

How each arm maps onto this fine-tuning (docs/real.md, "Intervention arms"):

- the **source features** are the source's class means of the block's input (the pooled
  hidden states of the training folds, raw: the theory columns' V);
- **replay** replaces the last round(λ·b) reviews of each batch of b by source training
  reviews (unrotated), drawn at random with the generator (batch seed, 9);
- **l2** pulls every trained weight toward the trained source model's (θ₀: the start of the
  fine-tune) by adding μ(θ − θ₀) to its gradient;
- **reweight** / **drop-negative** weigh each review's cross-entropy by the cosine of its
  pooled block input (rotated, if the task is) to the source mean v̄ (reweight: max(cos, 0)
  over its mean on the fine-tuning reviews; drop-negative: [cos >= τ]); a batch whose weights
  are all 0 takes no step (its reviews are dropped, weight decay included);
- the **projections** act on the weights' input side (``W ← W0 + ΔW P``): project-input on
  W_Q, W_K, W_V (the weights that read the block's input) off span(V); project-qk on W_Q,
  W_K; project-value on W_V off span(V) and on W_O off the value path's image of V at the
  start (W_V v_k + b_V: what W_O reads where a token is a source feature); project-activations
  on every linear weight (W_Q, W_K, W_V, W_O, the head) off the top directions (energy e) of
  its own inputs on the source training reviews; project-all both. The gradient is
  projected, and so is each AdamW step's change of the weight (Adam's per-coordinate
  scaling and the weight decay would take it out of the subspace): the weights' action on
  the protected directions stays the start's to float32 round-off.

The theory beside each arm: ``oodcalc.predict`` on V, U = the raw class means before and
after the rotation (or of the target domain) under the run's rule, with the arm's
intervention (:meth:`oodcalc.depth.arms.Arm.theory`); "no theory counterpart" where none.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..depth.arms import PROJECTIONS, Arm, top_directions, _projector_off, theory_text
from ..depth.arms_table import matched_F
from ..depth.design import DESIGN, benjamini_hochberg, contrast_interval
from ..depth.statistics import VERDICT_SEEDS
from ..errors import ComputationError, InputError
from .shared import interval, real_protocol, unit_columns
from .top import Training, _batch, batches

__all__ = [
    "ArmRuns", "LINEAR", "OUTPUT", "PROJECTIONS", "QKV", "REPLAY_STREAM", "RealIntervention",
    "action_change", "contrast", "levels", "mark", "matched", "pooled_input", "projected",
    "source_centre", "theory_F", "train_arm",
]

#: The generator of replay's source draws: (batch seed, REPLAY_STREAM).
REPLAY_STREAM = 9
#: Which linear weights of the top each projection touches (names relative to the top), and
#: what it projects them off: "span" the source features (or, for W_O, their image through
#: the value path), "acts" the top directions of the weight's own source inputs.
QKV = ("attention.self.query", "attention.self.key", "attention.self.value")
OUTPUT = "attention.output.dense"
LINEAR = QKV + (OUTPUT, "head")


def projected(arm: Arm) -> dict[str, tuple[str, ...]]:
    """{linear module: what it is projected off} for a projection arm."""
    n = arm.name
    if n == "project-input":
        return {m: ("span",) for m in QKV}
    if n == "project-qk":
        return {m: ("span",) for m in QKV[:2]}
    if n == "project-value":
        return {QKV[2]: ("span",), OUTPUT: ("span",)}
    if n == "project-activations":
        return {m: ("acts",) for m in LINEAR}
    if n == "project-all":
        return {**{m: ("span", "acts") for m in QKV + (OUTPUT,)}, "head": ("acts",)}
    return {}


def source_centre(means: np.ndarray) -> np.ndarray:
    """v̄: the mean of the source's unit class means, unit norm."""
    V = means / np.linalg.norm(means, axis=0)
    c = V.mean(1)
    return c / np.linalg.norm(c)


def pooled_input(h, mask):
    """Each review's block input pooled over its tokens (as Hidden.pooled)."""
    m = mask.unsqueeze(-1).to(h.dtype)
    return (h * m).sum(1) / m.sum(1)


class RealIntervention:
    """One arm on one fine-tune of the top ``top`` (which holds θ₀ when built).

    ``means`` (d × 2) are the source class means of the block's input, ``source_idx`` the
    source training reviews (replay's pool, project-activations' inputs), ``tune`` the
    fine-tuning reviews and ``rotation`` their rotation (reweight's normaliser)."""

    def __init__(self, arm: Arm, top, hidden, means: np.ndarray, source_idx: np.ndarray,
                 tune: np.ndarray, rotation=None) -> None:
        import torch
        self.arm, self.top, self.hidden = arm, top, hidden
        self.source_idx = np.asarray(source_idx)
        self.centre = torch.from_numpy(source_centre(np.asarray(means, np.float64)))
        self.span = torch.from_numpy(np.asarray(means, np.float64))
        self.anchor = ([(p, p.detach().clone()) for p in top.parameters()]
                       if arm.name == "l2" else [])
        self.normaliser = 1.0
        if arm.name == "reweight":
            cos = torch.cat([self.cosines(*_batch(hidden, b, rotation))
                             for b in np.array_split(tune, max(1, len(tune) // 64))])
            self.normaliser = float(torch.clamp_min(cos, 0).mean())
        self.projectors: dict[str, Any] = (self._projectors() if arm.name in PROJECTIONS
                                           else {})

    # per-sample weights --------------------------------------------------------------
    def cosines(self, h, mask):
        x = pooled_input(h, mask).double()
        return (x @ self.centre) / x.norm(dim=-1).clamp_min(1e-300)

    def sample_weights(self, h, mask):
        """Per-review loss weights of a batch (None: every review weighs 1, plain's loss)."""
        import torch
        if self.arm.name == "reweight":
            if self.normaliser <= 0:
                return torch.zeros(h.shape[0], dtype=torch.float64)
            return torch.clamp_min(self.cosines(h, mask), 0) / self.normaliser
        if self.arm.name == "drop-negative":
            return (self.cosines(h, mask) >= self.arm.value).double()
        return None

    # replay ----------------------------------------------------------------------------
    def replay_count(self, b: int) -> int:
        """Source reviews in a batch of b: round(λ·b), at most b − 1."""
        if self.arm.name != "replay" or b < 2:
            return 0
        return min(b - 1, round(self.arm.value * b))

    # projections -----------------------------------------------------------------------
    def modules(self) -> dict[str, Any]:
        return dict(self.top.named_modules())

    def _projectors(self) -> dict[str, Any]:
        """{module name: P (in × in, float64)} for the weights the arm projects."""
        import torch
        mods = self.modules()
        wanted = projected(self.arm)
        acts = self._input_moments() if any("acts" in v for v in wanted.values()) else {}
        out = {}
        for name, kinds in wanted.items():
            parts = []
            if "span" in kinds:
                if name == OUTPUT:         # W_O reads the value path's output
                    v = mods[QKV[2]]
                    with torch.no_grad():
                        parts.append(v.weight.double() @ self.span
                                     + v.bias.double()[:, None])
                else:
                    parts.append(self.span)
            if "acts" in kinds:
                parts.append(top_directions(acts[name], self.arm.value))
            out[name] = _projector_off(torch.cat(parts, 1), mods[name].in_features)
        return out

    def _input_moments(self) -> dict[str, Any]:
        """Each linear weight's uncentred input second moment on the source training
        reviews (unrotated, eval mode, one review at a time: no padding tokens)."""
        import torch
        moments: dict[str, Any] = {}

        def add(key, x):
            x = x.detach().reshape(-1, x.shape[-1]).double()
            moments[key] = moments.get(key, 0) + x.T @ x

        mods = self.modules()
        hooks = [mods[n].register_forward_hook(lambda m, args, out, key=n: add(key, args[0]))
                 for n in LINEAR]
        was_training = self.top.training
        self.top.eval()
        try:
            with torch.no_grad():
                for i in self.source_idx:
                    self.top(*_batch(self.hidden, np.array([i]), None))
        finally:
            for h in hooks:
                h.remove()
            self.top.train(was_training)
        return moments

    def after_backward(self) -> None:
        """Project the gradients, then add the pull μ(θ − θ₀) (μ = 0 adds zeros)."""
        mods = self.modules()
        for name, P in self.projectors.items():
            g = mods[name].weight.grad
            if g is not None:
                g.copy_((g.double() @ P).to(g.dtype))
        for p, p0 in self.anchor:
            if p.grad is not None:
                p.grad.add_(p.detach() - p0, alpha=self.arm.value)

    def before_step(self) -> list:
        """The projected weights before the optimizer's step."""
        mods = self.modules()
        return [(mods[n].weight, mods[n].weight.detach().clone(), P)
                for n, P in self.projectors.items()]

    def after_step(self, saved: list) -> None:
        """Keep only the step's change off the protected directions: W ← W₋ + (W − W₋) P."""
        import torch
        with torch.no_grad():
            for w, before, P in saved:
                step = (w.double() - before.double()) @ P
                w.copy_((before.double() + step).to(w.dtype))


def action_change(top, start: dict[str, Any], intervention: RealIntervention) -> float:
    """Largest relative change of a projected weight's action on its protected directions:
    max ‖(W − W₀) B‖ / ‖W₀ B‖ over the projected weights (B an orthonormal basis of what
    it is projected off; 0 when nothing is projected)."""
    import torch
    worst = 0.0
    mods = dict(top.named_modules())
    for name, P in intervention.projectors.items():
        n = P.shape[0]
        vals, vecs = torch.linalg.eigh(torch.eye(n, dtype=torch.float64) - P)
        B = vecs[:, vals > 0.5]
        W0 = start[name + ".weight"].double()
        W = mods[name].weight.detach().double()
        worst = max(worst, float(((W - W0) @ B).norm() / (W0 @ B).norm()))
    return worst


# --- the fine-tune -------------------------------------------------------------------------

def train_arm(top, hidden, labels: np.ndarray, idx: np.ndarray, training: Training, seed: int,
              intervention: RealIntervention | None, rotation=None,
              curve=None) -> list:
    """``oodcalc.real.top.train`` with everything moving, under an arm (None or plain: the
    same numbers as ``train``, bit for bit); ``curve()``, if given, is called before the
    first step and after every step (in eval mode; the training's random numbers are not
    touched) and its values returned."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    replay_rng = np.random.default_rng([seed, REPLAY_STREAM])
    y = torch.from_numpy(labels.astype(np.int64))
    arm = intervention.arm if intervention is not None else Arm()
    opt = torch.optim.AdamW([p for p in top.parameters() if p.requires_grad],
                            lr=training.lr, weight_decay=training.weight_decay)
    points = []

    def record():
        if curve is not None:
            points.append(curve())
            top.train()

    record()
    top.train()
    try:
        for b in batches(hidden.lengths, idx, training, rng):
            k = intervention.replay_count(len(b)) if intervention is not None else 0
            h, mask = _batch(hidden, b, rotation)
            target = y[b]
            if k:
                drawn = replay_rng.choice(intervention.source_idx, size=k, replace=False)
                h, mask = _mixed(h[:len(b) - k], mask[:len(b) - k],
                                 *_batch(hidden, drawn, None))
                target = torch.cat([y[b[:len(b) - k]], y[drawn]])
            weights = intervention.sample_weights(h, mask) if intervention is not None \
                else None
            if weights is not None and not bool((weights > 0).any()):
                record()                       # every review dropped: no step
                continue
            if weights is None:
                loss = F.cross_entropy(top(h, mask), target)
            else:
                per = F.cross_entropy(top(h, mask), target, reduction="none")
                loss = (per * weights.to(per.dtype)).mean()
            opt.zero_grad()
            loss.backward()
            if intervention is not None and not arm.plain:
                intervention.after_backward()
                saved = intervention.before_step()
                opt.step()
                intervention.after_step(saved)
            else:
                opt.step()
            record()
    finally:
        top.eval()
    return points


def _mixed(h1, m1, h2, m2):
    """Two batches of token states as one, padded to the longer (padding masked out)."""
    import torch
    S = max(h1.shape[1], h2.shape[1])

    def pad(h, m):
        extra = S - h.shape[1]
        if extra:
            h = torch.cat([h, h.new_zeros(h.shape[0], extra, h.shape[2])], 1)
            m = torch.cat([m, m.new_zeros(m.shape[0], extra)], 1)
        return h, m

    (h1, m1), (h2, m2) = pad(h1, m1), pad(h2, m2)
    return torch.cat([h1, h2]), torch.cat([m1, m2])


# --- the theory beside each arm -----------------------------------------------------------

def theory_F(arm: Arm, means_source: np.ndarray, means_ood: np.ndarray, protocol,
             rule: str) -> tuple[float | None, str]:
    """The theory's F for the arm's intervention on V, U = the raw class means (as the
    forgetting table's "raw means" column, under ``rule``), and how the theory takes it."""
    from ..geometry import from_arrays
    from ..prediction import predict
    from ..setting import Setting
    interventions = arm.theory()
    if interventions is None:
        return None, "no theory counterpart"
    V, U = unit_columns(means_source), unit_columns(means_ood)
    base = real_protocol(protocol, V.T @ V, U.T @ U, rule)
    how = theory_text(arm)
    if "l2" in interventions and base.eta_ft != protocol.eta_ft:
        # the relative rule steps η_ft/c³ (the error gradient is c³ times the orthonormal
        # one's): μ·c³ keeps the pull per step η_ft·μ the orthonormal one's (μ as given,
        # η_ft·μ ≈ 10³ would overshoot Q₁ and diverge)
        c3 = protocol.eta_ft / base.eta_ft
        interventions = {**interventions, "l2": interventions["l2"] * c3}
        how = f"l2={arm.value:g}·c_U³ = {interventions['l2']:.2g}"
    used = dataclasses.replace(base, **interventions)
    try:
        return float(predict(Setting(from_arrays(V, U), used)).F), how
    except InputError as err:
        if "nothing would be fine-tuned" in str(err):
            return 0.0, how + " (every weight 0: nothing fine-tuned)"
        raise
    except ComputationError:
        # e.g. replay's or l2's fixed point above the (relative) rule: stated, not hidden
        return None, how + " (the theory's fine-tuning never meets its rule)"



# --- the matched-loss endpoint --------------------------------------------------------

def levels(start: float, end: float, shares: Sequence[float]) -> list[float] | None:
    """ℓ_s = L_U(0)^(1−s) · L_end^s: shares of the way (in log) from the OOD loss at the
    start, which every arm of a fit shares, to plain's at the end of its fine-tune (the
    real fine-tune runs a fixed length, no stopping rule); None when plain did not lower it."""
    if not (end < start) or end <= 0:
        return None
    return [math.exp((1 - s) * math.log(start) + s * math.log(end)) for s in shares]


def matched(curve: Sequence[tuple[float, float]], targets: Sequence[float] | None
            ) -> list[float | None]:
    """F at each level from a fit's (L_U, F) curve (oodcalc.depth.arms_table.matched_F);
    None where the fit never got there."""
    if targets is None:
        return [None] * len(DESIGN.matched_levels)
    L = np.array([c[0] for c in curve])
    Fs = np.array([c[1] for c in curve])
    return [matched_F(L, Fs, t) for t in targets]


# --- the record and its summary -----------------------------------------------------------

def contrast(mine: Sequence[float], plain: Sequence[float]) -> dict[str, Any]:
    """arm − plain paired by seed: the design's t interval and p (BH marks are added over
    the whole table by :func:`mark`)."""
    pairs = [(a, b) for a, b in zip(mine, plain) if a is not None and b is not None]
    mean, low, high, p = contrast_interval([a - b for a, b in pairs])
    fin = lambda x: None if not math.isfinite(x) else x  # noqa: E731
    return {"n": len(pairs), "mean": fin(mean), "ci95_t": [fin(low), fin(high)], "p": fin(p),
            "bh_rejected": None}


def mark(conditions: list[dict[str, Any]]) -> None:
    """Benjamini–Hochberg at the design's q within each endpoint family (F at the end of the
    fine-tune; F at matched OOD loss, all levels), over contrasts with >= VERDICT_SEEDS
    paired seeds; the rest keep ``bh_rejected`` None (no mark)."""
    primary = [r["versus_plain"] for c in conditions for r in c["rows"]
               if r["versus_plain"] is not None]
    secondary = [m["versus_plain"] for c in conditions for r in c["rows"]
                 for m in r["matched"] if m["versus_plain"] is not None]
    for family in (primary, secondary):
        tested = [x for x in family if x["n"] >= VERDICT_SEEDS and x["p"] is not None]
        for x, r in zip(tested, benjamini_hochberg([x["p"] for x in tested], DESIGN.fdr)):
            x["bh_rejected"] = bool(r)


@dataclass
class ArmRuns:
    """What the forgetting loop records per arm (filled fit by fit)."""

    arms: tuple[Arm, ...]
    conditions: Sequence[str]
    seeds: int
    n_src: int

    def __post_init__(self) -> None:
        self.F = {c: {a: np.zeros((self.seeds, self.n_src)) for a in self.arms}
                  for c in self.conditions}
        self.fits: dict[str, dict[Arm, list]] = {c: {a: [] for a in self.arms}
                                                 for c in self.conditions}
        self.theory: dict[str, dict[Arm, list]] = {c: {a: [] for a in self.arms}
                                                   for c in self.conditions}
        self._theory_memo: dict = {}

    def fine_tune(self, cond: str, s: int, fold: int, top, state, hidden, labels,
                  tune, rotation, held, test_idx, test_pos, base: np.ndarray,
                  training: Training, batch_seed: int, means: np.ndarray,
                  source_idx: np.ndarray, theory_pair: tuple[np.ndarray, np.ndarray],
                  protocol, rule: str, progress=None) -> None:
        """Every arm's fine-tune of one fit on one condition, from the trained model
        ``state`` on the same batches, with its (L_U, F) curve after every step; the
        theory's F for the arm on ``theory_pair`` (source, OOD class means)."""
        from .top import losses
        for arm in self.arms:
            top.load_state_dict(state)
            intervention = RealIntervention(arm, top, hidden, means, source_idx, tune,
                                            rotation)

            def curve():
                L = float(losses(top, hidden, labels, held, rotation).mean())
                return (L, float((losses(top, hidden, labels, test_idx) - base).mean()))

            points = train_arm(top, hidden, labels, tune, training, batch_seed, intervention,
                               rotation, curve)
            after = losses(top, hidden, labels, test_idx) - base
            self.F[cond][arm][s, test_pos] = after
            self.fits[cond][arm].append({"seed": s, "fold": fold, "n": int(len(test_pos)),
                                         "curve": points})
            key = (arm, *(np.asarray(x, np.float64).tobytes() for x in theory_pair))
            if key not in self._theory_memo:      # a domain's pair is the same every fit
                self._theory_memo[key] = theory_F(arm, *theory_pair, protocol, rule)
            self.theory[cond][arm].append(self._theory_memo[key])
            if progress is not None:
                progress()

    def summary(self, rng, B: int) -> dict[str, Any]:
        plain = next(a for a in self.arms if a.plain)
        shares = DESIGN.matched_levels
        out = []
        for cond in self.conditions:
            fits = self.fits[cond]
            # the matched levels of each fit, from plain's curve
            lv = [levels(f["curve"][0][0], f["curve"][-1][0], shares) for f in fits[plain]]
            per_seed_F = {a: self.F[cond][a].mean(axis=1).tolist() for a in self.arms}

            def per_seed_matched(arm: Arm) -> list[list[float | None]]:
                """[level][seed]: mean F at the level over the seed's fits reaching it."""
                got: list[list[list[float]]] = [[[] for _ in range(self.seeds)]
                                                for _ in shares]
                for f, targets in zip(fits[arm], lv):
                    for j, v in enumerate(matched(f["curve"], targets)):
                        if v is not None:
                            got[j][f["seed"]].append(v)
                return [[float(np.mean(x)) if x else None for x in level] for level in got]

            plain_matched = per_seed_matched(plain)
            rows = []
            for arm in self.arms:
                mine = per_seed_matched(arm)
                theory = self.theory[cond][arm]
                values = [t for t, _ in theory if t is not None]
                ends = [f["curve"][-1][0] for f in fits[arm]]
                rows.append({
                    "arm": arm.describe(), "label": arm.label,
                    "F": interval(self.F[cond][arm].mean(axis=0), rng, B),
                    "F_seeds": per_seed_F[arm],
                    "ood_before": float(np.mean([f["curve"][0][0] for f in fits[arm]])),
                    "ood_after": float(np.mean(ends)),
                    "theory_F": float(np.mean(values)) if values else None,
                    "theory_as": theory[0][1] if theory else theory_text(arm),
                    "versus_plain": None if arm.plain else contrast(per_seed_F[arm],
                                                                    per_seed_F[plain]),
                    "matched": [{"s": s_, "F_seeds": mine[j],
                                 "F": _mean(mine[j]),
                                 "not_reached": sum(v is None for v in
                                                    (matched(f["curve"], t)[j]
                                                     for f, t in zip(fits[arm], lv))),
                                 "versus_plain": None if arm.plain else
                                 contrast(mine[j], plain_matched[j])}
                                for j, s_ in enumerate(shares)],
                    "fits": fits[arm]})
            out.append({"condition": cond, "rows": rows})
        mark(out)
        return {"arms": [a.describe() for a in self.arms],
                "design": DESIGN.describe(), "matched_levels": list(shares),
                "contrast": "arm − plain paired by seed (each seed's cross-validated F); "
                            f"two-sided 95% t interval; BH at q = {DESIGN.fdr:g} per endpoint "
                            f"family, marked only from >= {VERDICT_SEEDS} seeds",
                "conditions": out}


def _mean(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return float(np.mean(got)) if got else None

