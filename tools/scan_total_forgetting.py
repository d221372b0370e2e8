"""Is the total forgetting F of plain fine-tuning ever positive for K >= 3, under the
stopping rule? (F > 0 occurs at K = 2, e.g. γ = (1, −0.9); per-feature F_k > 0 at every K.)

Answer recorded in docs/total_forgetting.json (tools/generate_docs.py renders docs/theory.md's
`total-forgetting` block from it): yes, but in every case found each phase is one gradient
step (T1 = T2 = 1) landing far past the threshold, mostly with predict's "too coarse"
warning; none where pretraining takes two steps or more. Every run is the exact population dynamics of a parallel shift (M = diag(γ)):
the batched descent that oodcalc.predict runs (oodcalc.finetune.dynamics.descend from
MᵀZ1M, Z1 from oodcalc.prediction.pretrain_logits; the same arithmetic, checked equal to
oc.predict on the recorded points, which are recomputed with oc.predict).

Searches (seeded, SEED below):
- random: up to 4000 shifts per pair (fewer where T1 is long), K = 3..6 on the ε × η grid EPS × ETA, every pair predict does not warn about
  (a coarse pair is counted, not run) and whose pretraining takes at most MAX_T1 steps;
  γ drawn from seven families, rounded to 3 decimals (uniform; scaled toward 0; one weak feature opposed to strong
  ones, the best shape found; K = 2's positive pair (1, −x) embedded with the rest random;
  near ±1; heavy-tailed toward 0; two weak features against one strong).
- ascent: differential evolution (scipy) maximising ρ = F / Σ|F_k| (scale-free, so it
  cannot drift to M → 0 or M → ±I where F → 0) over γ ∈ [−1, 1]^K, the initial population
  seeded with K = 2's positive pair, at the resolved pairs ASCENT.
- epsilon trend: ρ at the best shape γ = (1/4, −1, −1) as ε falls (η = 2, resolved).
- large steps: differential evolution maximising F / e(T1) at the pairs COARSE (K = 3..6,
  ε = 0.01, η = 40..300, and three at ε = 0.3, 0.2 where one step is not "too coarse";
  pretraining takes a few steps or one); the K = 3 counterexample is then rounded (γ = (0.5, 0.5, −1)) and rerun with
  oc.predict.

- general M (not the question's parallel shifts): shared_centre() below, at the default
  protocol ε = 0.01, η = 0.1, and its mutation (the shared direction v_3 instead of v̄).

Run: nice python tools/scan_total_forgetting.py   (about 1 minute on one core)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import differential_evolution

import oodcalc as oc
from oodcalc import estimates, theory
from oodcalc.finetune.dynamics import descend
from oodcalc.io import write_atomic
from oodcalc.model import conditional_errors
from oodcalc.prediction import pretrain_logits

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "total_forgetting.json"
SEED = 20261203
EPS = (0.3, 0.2, 0.1, 0.05, 0.02, 0.01, 0.003, 0.001, 3e-4, 1e-4)
ETA = (0.02, 0.1, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
MAX_T1 = 12000
WORK = 3e6                      # configurations × K² × T1 per grid pair
ASCENT = ((3, 0.2, 1.0), (3, 0.01, 1.0), (3, 0.001, 2.0), (3, 1e-4, 2.0),
          (4, 0.01, 1.0), (4, 0.001, 2.0), (5, 0.01, 1.0), (6, 0.01, 1.0))
TREND_EPS = (0.01, 1e-3, 1e-4, 1e-5)
# K = 3 stops at η = 150: at 300 e(T1) ≈ 3e-29 is below what float64 resolves of 1 − Attn
COARSE = tuple((K, 0.01, eta) for K in (3, 4, 5, 6) for eta in (40, 50, 80, 150, 300)
               if (K, eta) != (3, 300)) + ((3, 0.3, 48), (4, 0.3, 128), (4, 0.2, 128))
COUNTEREXAMPLE = {"gamma": [0.5, 0.5, -1.0], "eps": 0.01, "eta": 50.0}


def total_forgetting(gamma, eps: float, eta: float) -> tuple[float, int]:
    """F and T2 from oc.predict (the stopping rule in both phases)."""
    report = oc.predict(oc.Setting(oc.parallel_shift(list(gamma)),
                                   oc.Protocol(eps=eps, eta=eta)))
    return float(report.F), int(report.finetune.T2)


def coarse(pair: "Pair") -> bool:
    """predict's "too coarse" warning: pretraining passes α* by more than one GD step."""
    overshoot = pair.z1[0, 0] - theory.alpha_star(pair.K, pair.eps)
    return pair.T1 > 0 and overshoot > estimates.step_at_threshold(pair.K, pair.eps, pair.eta)


class Pair:
    """One (K, ε, η): pretraining once, then fine-tuning of a batch of parallel shifts."""

    def __init__(self, K: int, eps: float, eta: float) -> None:
        self.K, self.eps, self.eta = K, eps, eta
        run = pretrain_logits(K, eps, eta, 10 ** 7)
        self.z1, self.T1 = run.z[0], int(run.steps[0])
        self.e1 = float(conditional_errors(self.z1)[0])

    def run(self, G: np.ndarray):
        """F (B,), F_k (B, K), T2 (B,), reached (B,) for the rows γ of G."""
        G = np.atleast_2d(np.asarray(G, dtype=float))
        zU = G[:, :, None] * self.z1[None] * G[:, None, :]          # MᵀZ1M, M = diag(γ)
        run = descend(zU, self.eta, self.eps, 20 * self.T1 + 100)
        zV = self.z1[None] + G[:, :, None] * (run.z - zU) * G[:, None, :]
        Fk = (conditional_errors(zV) - conditional_errors(self.z1)[None]) / self.K
        return Fk.sum(1), Fk, run.steps, run.converged


def rho(F: np.ndarray, Fk: np.ndarray) -> np.ndarray:
    """F / Σ|F_k| in [−1, 1] (0 where nothing moves); > 0 exactly when F > 0."""
    scale = np.abs(Fk).sum(1)
    return np.where(scale > 0, F / np.where(scale > 0, scale, 1), 0.0)


def families(rng: np.random.Generator, K: int, B: int) -> np.ndarray:
    kind = rng.integers(7, size=B)
    G = rng.uniform(-1, 1, (B, K))
    n = kind == 1
    G[n] *= rng.uniform(0, 0.3, (n.sum(), 1))
    n = kind == 2                                                  # weak vs strong
    G[n] = np.c_[rng.uniform(0, 0.6, (n.sum(), 1)), -rng.uniform(0.7, 1, (n.sum(), K - 1))]
    n = kind == 3                                                  # K = 2's pair embedded
    G[n, :2] = np.c_[np.ones(n.sum()), -rng.uniform(0.3, 1, n.sum())]
    n = kind == 4
    G[n] = rng.choice([-1, 1], (n.sum(), K)) * rng.uniform(0.8, 1, (n.sum(), K))
    n = kind == 5
    G[n] = rng.choice([-1, 1], (n.sum(), K)) * rng.uniform(0, 1, (n.sum(), K)) ** 3
    n = kind == 6                                                  # two weak vs one strong
    G[n, :3] = np.c_[rng.uniform(0, 0.6, (n.sum(), 2)), -np.ones(n.sum())]
    return np.round(rng.permuted(G, axis=1), 3)


def random_search(rng: np.random.Generator) -> dict:
    runs = positive = unmoved = 0
    skipped = {"coarse": 0, "long": 0}
    best_F, best_rho = None, None
    for K in (3, 4, 5, 6):
        for eps in EPS:
            for eta in ETA:
                if estimates.pretrain_steps(K, eps, eta) > 2 * MAX_T1:
                    skipped["long"] += 1              # not even pretrained
                    continue
                pair = Pair(K, eps, eta)
                if pair.T1 > MAX_T1:
                    skipped["long"] += 1
                    continue
                if coarse(pair):
                    skipped["coarse"] += 1
                    continue
                G = families(rng, K, int(min(4000, max(100, WORK / (K * K * pair.T1)))))
                F, Fk, T2, reached = pair.run(G)
                moved = reached & (np.abs(Fk).sum(1) > 0)     # not γ = 0 or T2 = 0
                F, r = np.where(moved, F, -np.inf), np.where(moved, rho(F, Fk), -np.inf)
                runs += int(reached.sum())
                unmoved += int((reached & ~moved).sum())
                positive += int((F > 0).sum())
                i, j = int(F.argmax()), int(r.argmax())
                row = lambda n: {"F": float(F[n]), "rho": float(r[n]), "K": K, "eps": eps,
                                 "eta": eta, "gamma": G[n].tolist(), "T2": int(T2[n])}
                if best_F is None or F[i] > best_F["F"]:
                    best_F = row(i)
                if best_rho is None or r[j] > best_rho["rho"]:
                    best_rho = row(j)
    return {"runs": runs, "positive": positive, "unmoved": unmoved, "skipped_pairs": skipped,
            "largest_F": best_F, "largest_rho": best_rho}


def ascents() -> list[dict]:
    out = []
    for K, eps, eta in ASCENT:
        pair = Pair(K, eps, eta)

        def objective(X):                  # vectorised: X is (K, S)
            F, Fk, _, reached = pair.run(X.T)
            return -np.where(reached, rho(F, Fk), -1.0)

        init = np.random.default_rng(SEED + K).uniform(-1, 1, (15 * K, K))
        init[:K, :2] = (1, -0.9)                      # K = 2's positive pairs, embedded
        init[K:2 * K, :2] = (1, -0.58)
        result = differential_evolution(objective, [(-1, 1)] * K, init=init, maxiter=40,
                                        seed=SEED, polish=False, vectorized=True,
                                        updating="deferred", tol=1e-10)
        gamma = np.round(result.x, 3)
        F, Fk, _, _ = pair.run(gamma)
        out.append({"K": K, "eps": eps, "eta": eta, "rho": float(rho(F, Fk)[0]),
                    "F": float(F[0]), "gamma": gamma.tolist()})
    return out


def epsilon_trend() -> list[dict]:
    out = []
    for eps in TREND_EPS:
        F, Fk, _, _ = Pair(3, eps, 2.0).run([0.25, -1, -1])
        out.append({"eps": eps, "eta": 2.0, "rho": float(rho(F, Fk)[0]),
                    "F_weak_over_eps": float(Fk[0, 0] / eps)})
    return out


def coarse_search() -> list[dict]:
    out = []
    for K, eps, eta in COARSE:
        pair = Pair(K, eps, eta)

        def objective(X):
            F, _, _, reached = pair.run(X.T)
            return -np.where(reached, F / pair.e1, -1e3)

        result = differential_evolution(objective, [(-1, 1)] * K, popsize=15, maxiter=30,
                                        seed=SEED + K, polish=False, vectorized=True,
                                        updating="deferred")
        gamma = np.round(result.x, 3)
        F, _, T2, _ = pair.run(gamma)
        out.append({"K": K, "eps": eps, "eta": eta, "coarse": bool(coarse(pair)),
                    "T1": pair.T1, "e_T1": pair.e1,
                    "F": float(F[0]), "T2": int(T2[0]), "gamma": gamma.tolist()})
    return out


def counterexample() -> dict:
    c = COUNTEREXAMPLE
    report = oc.predict(oc.Setting(oc.parallel_shift(c["gamma"]),
                                   oc.Protocol(eps=c["eps"], eta=c["eta"])))
    return {**c, "K": len(c["gamma"]), "F": float(report.F),
            "F_k": [float(f.F_k) for f in report.forgetting],
            "T1": int(report.pretrain.T1), "T2": int(report.finetune.T2),
            "step_size_bound": float(report.finetune.step_size_bound),
            "coarse": any("too coarse" in w for w in report.warnings)}


def shared_centre(centre: str = "mean") -> tuple[np.ndarray, np.ndarray]:
    """Not a parallel shift (K = 3, d = 4): u_1, u_3 = (a ± w)/√2 share the source direction
    a (v̄ = Σv_i/√3, or v_3 for the mutation), w ⊥ span(V), and u_2 = (v_1 − v_2)/√2."""
    V, w = np.eye(4)[:, :3], np.eye(4)[:, 3]
    a = V.sum(1) / np.sqrt(3) if centre == "mean" else V[:, 2]
    return V, np.c_[(a + w) / np.sqrt(2), (V[:, 0] - V[:, 1]) / np.sqrt(2), (a - w) / np.sqrt(2)]


def general_example() -> dict:
    out = {}
    for centre in ("mean", "v3"):
        report = oc.predict(oc.Setting(oc.from_arrays(*shared_centre(centre)),
                                       oc.Protocol(eps=0.01, eta=0.1)))
        out[centre] = {"F": float(report.F), "F_k": [float(f.F_k) for f in report.forgetting],
                       "T1": int(report.pretrain.T1), "T2": int(report.finetune.T2),
                       "warnings": len(report.warnings)}
    return out


def main() -> int:
    rng = np.random.default_rng(SEED)
    record = {"seed": SEED, "oodcalc": oc.__version__,
              "grid": {"eps": list(EPS), "eta": list(ETA), "max_T1": MAX_T1},
              "random": random_search(rng), "ascent": ascents(),
              "epsilon_trend": epsilon_trend(), "coarse": coarse_search(),
              "counterexample": counterexample(), "general": general_example(),
              "recipe": "python tools/scan_total_forgetting.py"}
    text = json.dumps(record, indent=1) + "\n"
    write_atomic(RECORD, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
