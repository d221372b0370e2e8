"""The real-text experiment's fits as (seed, fold) tasks: cached, resumable, and runnable on a
dask cluster.

Each fit (one seed's cross-validation repetition, one held-out fold) is a pure function of
the config, the seed, the fold and the shared data (:class:`Shared`: the hidden states at
the cut, their pooled means, labels, domains and the encoder's layers the top copies):
:func:`fold_task` trains the top and returns everything the fit contributes as plain lists
and dicts (JSON-ready; floats round-trip exactly through JSON). :func:`collect` reads the
finished tasks from :class:`TaskCache` (one JSON file per task under the hidden states'
cache directory, ``real-tasks/``, keyed by a hash of everything that determines it),
computes the rest (here, or on a dask cluster with the shared data scattered once to the
workers) and stores each as it finishes, so a killed run resumes where it stopped.
The experiment (:func:`oodcalc.real.experiment.run`) assembles them in (seed, fold) order.
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..depth.cache import Cache
from .encoder import Encoder, Hidden

__all__ = ["FORMAT", "Shared", "TaskCache", "collect", "condition_names", "fold_task",
           "in_processes", "shape_of", "targets_of", "task_cache", "task_parameters",
           "test_positions", "well_formed_task"]

#: Bump when a task's record would change for the same parameters.
FORMAT = 1
#: One fit at a time per process: a fit seeds torch's global generator (initialisation,
#: dropout) and sets its process-wide thread count, so two fits in threads of one process
#: (a dask worker with --nthreads 2, an in-process cluster) would draw each other's numbers.
_ONE_FIT = threading.Lock()


@dataclass(frozen=True)
class Shared:
    """What every task reads and none changes: sent to a cluster's workers once."""

    encoder: Encoder          # its model only (the tokenizer is not needed by a task)
    hidden: Hidden
    pooled: np.ndarray        # hidden.pooled() in float64
    labels: np.ndarray
    domains: np.ndarray

    @classmethod
    def of(cls, encoder: Encoder, hidden: Hidden, labels: np.ndarray,
           domains: np.ndarray) -> "Shared":
        return cls(dataclasses.replace(encoder, tokenizer=None), hidden,
                   hidden.pooled().astype(np.float64), labels, domains)


def targets_of(domains: np.ndarray, source: str) -> list[str]:
    from .data import DOMAINS
    present = list(dict.fromkeys([d for d in DOMAINS if d in set(domains)] + list(domains)))
    return [d for d in present if d != source]


def condition_names(targets: list[str]) -> list[str]:
    from .fits import FORGET_THETAS
    return [f"rotation θ = {name}" for name, _ in FORGET_THETAS] + \
        [f"domain: {d}" for d in targets]


def test_positions(labels: np.ndarray, src: np.ndarray, config, s: int) -> list[np.ndarray]:
    """Seed s's folds (positions within the source): the same split whichever fold asks."""
    from .fits import stratified_folds
    return stratified_folds(labels[src], config.folds, np.random.default_rng([s, 0]))


def fold_task(shared: Shared, config, s: int, f: int,
              advance: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Fit (s, f): train the top on the other folds of seed s's split and return what the
    held-out fold contributes (the loop body of the experiment, unchanged): per-review
    losses under every rotation family and θ, γ_eff and the theory at the real geometry
    per θ, the target domains' losses, the forgetting fine-tunes' F per part with their
    OOD loss before and after, the theory's F at the real geometry, and every arm's fit."""
    import torch
    with _ONE_FIT:
        threads = torch.get_num_threads()
        torch.set_num_threads(config.threads)      # a dask worker's own count otherwise
        try:
            return _fold_task(shared, config, s, f, advance or (lambda n=1: None))
        finally:
            torch.set_num_threads(threads)


def _fold_task(shared: Shared, config, s: int, f: int, advance) -> dict[str, Any]:
    from .fits import (FAMILIES, FINETUNED, FORGET_THETAS, SourceTheory, class_means,
                             theory_for, theory_raw)
    from .top import (Rotation, dimension_pairs, head_difference, init_head, losses,
                      make_top, probe, train)
    encoder, hidden, pooled = shared.encoder, shared.hidden, shared.pooled
    labels, domains = shared.labels, shared.domains
    src = np.flatnonzero(domains == config.source)
    n_src = len(src)
    targets = targets_of(domains, config.source)
    tgt_idx = {d: np.flatnonzero(domains == d) for d in targets}
    names = condition_names(targets)
    thetas = np.linspace(0.0, math.pi, config.steps + 1)

    test_pos = test_positions(labels, src, config, s)[f]
    seed = 1000 * s + f
    train_pos = np.setdiff1d(np.arange(n_src), test_pos)
    train_idx, test_idx = src[train_pos], src[test_pos]
    # rank dimensions by the probe's weight difference on standardised features
    # (|w_raw| · sd: how much the probe leans on each dimension)
    w_raw, _ = probe(pooled[train_idx], labels[train_idx])
    pairs = dimension_pairs(w_raw * pooled[train_idx].std(axis=0), config.pairs,
                            np.random.default_rng([s, f, 1]))
    top = make_top(encoder, config.layer, seed)
    init_head(top, hidden, labels, train_idx)
    train(top, hidden, labels, train_idx, config.training, seed)
    # the same scenarios, ranked by what the trained head reads (its weight
    # difference times the spread of the block's output, dimension by dimension)
    by_head = dimension_pairs(head_difference(top, hidden, train_idx), config.pairs,
                              np.random.default_rng([s, f, 1]))
    pairs.update({f"{fam} (head)": by_head[fam] for fam in ("scenario 1", "scenario 2")})
    advance()

    base = losses(top, hidden, labels, test_idx)
    means = class_means(pooled[train_idx], labels[train_idx])
    real_theory = SourceTheory(means, config.protocol, config.theory_rule)
    rot: dict[str, list] = {}
    gamma_eff: dict[str, list] = {}
    theory_real: dict[str, dict[str, list]] = {}
    for fam in FAMILIES:
        a, b = pairs[fam]
        rot[fam], gamma_eff[fam], theory_real[fam] = [], [], {}
        for t, theta in enumerate(thetas):
            R = Rotation(a, b, theta)
            rot[fam].append((losses(top, hidden, labels, test_idx, R) if t else base).tolist())
            p = pooled[test_idx]
            Rp = R.apply(p)
            gamma_eff[fam].append(float(np.mean(np.sum(p * Rp, 1) / np.sum(p * p, 1))))
            for col, e in real_theory.ood(R.apply(means.T).T).items():
                theory_real[fam].setdefault(col, []).append(e)
    shift = {d: losses(top, hidden, labels, idx).tolist() for d, idx in tgt_idx.items()}
    advance()

    state = {k: v.clone() for k, v in top.state_dict().items()}
    a, b = pairs["all"]
    # (condition, examples fine-tuned on, their rotation, held-out examples of the
    # new task and its rotation, the batches' seed)
    tasks = []
    theory_forget_real = {}
    for (name, theta), cond in zip(FORGET_THETAS, names):
        R = Rotation(a, b, theta)
        tasks.append((cond, train_idx, R, test_idx, seed + 500))
        rotated = R.apply(means.T).T
        theory_forget_real[name] = {
            "raw": theory_raw(means, rotated, config.protocol, config.theory_rule)["F"],
            "orthonormalised": theory_for(means, rotated, config.protocol)["F"]}
    for d in targets:
        pick = np.random.default_rng([s, f, 2]).permutation(tgt_idx[d])
        tune = pick[:min(len(train_idx), len(pick) // 2)]
        tasks.append((f"domain: {d}", tune, None, pick[len(tune):len(tune) + 64], seed + 700))
    arm_runs = None
    if config.arms:
        from .arms import ArmRuns
        # this seed's row only is filled (rows are seeds)
        arm_runs = ArmRuns(config.arms, names, s + 1, n_src)
    forget: dict[str, dict[str, list]] = {}
    forget_ood: dict[str, dict[str, list]] = {}
    for cond, tune, R, held, batch_seed in tasks:
        forget[cond], forget_ood[cond] = {}, {}
        top.load_state_dict(state)          # the trained model, not the last fit
        before = losses(top, hidden, labels, held, R).mean()
        for part, moving in FINETUNED.items():
            # every part fine-tunes on the same batches (common random numbers)
            top.load_state_dict(state)
            train(top, hidden, labels, tune, config.finetune, batch_seed, R, moving)
            forget[cond][part] = (losses(top, hidden, labels, test_idx) - base).tolist()
            forget_ood[cond][part] = [float(before),
                                      float(losses(top, hidden, labels, held, R).mean())]
        advance()
        if arm_runs is not None:
            # the theory beside each arm on the geometry the forgetting table uses:
            # this fit's source means against their rotation, or all the source's
            # against all the domain's
            if R is not None:
                theory_pair = (means, R.apply(means.T).T)
            else:
                d = cond.split(": ", 1)[1]
                theory_pair = (class_means(pooled[src], labels[src]),
                               class_means(pooled[tgt_idx[d]], labels[tgt_idx[d]]))
            arm_runs.fine_tune(cond, s, f, top, state, hidden, labels, tune, R, held,
                               test_idx, test_pos, base, config.finetune, batch_seed,
                               means, train_idx, theory_pair, config.protocol,
                               config.theory_rule, advance)
    out = {"seed": s, "fold": f, "test_pos": test_pos.tolist(), "rot": rot,
           "gamma_eff": gamma_eff, "theory_real": theory_real, "shift": shift,
           "forget": forget, "forget_ood": forget_ood,
           "theory_forget_real": theory_forget_real}
    if arm_runs is not None:
        out["arms"] = {cond: [{"F": arm_runs.F[cond][arm][s, test_pos].tolist(),
                               "fit": _plain(arm_runs.fits[cond][arm][0]),
                               "theory": list(arm_runs.theory[cond][arm][0])}
                              for arm in config.arms] for cond in names}
    return out


def _plain(x: Any) -> Any:
    """Tuples as lists, numpy scalars as Python numbers: what JSON gives back."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


# --- the cache ------------------------------------------------------------------------

def task_parameters(config, data_sha256: str, encoder: Encoder, hidden_key: str, s: int,
                    f: int) -> dict[str, Any]:
    """Everything that determines fit (s, f). The seed count, bootstrap and permutation
    draws only enter the summary: a run with more seeds reuses the fits of the first."""
    from .fits import versions
    described = {k: v for k, v in config.describe().items()
                 if k not in ("seeds", "bootstrap", "permutations")}
    return {"task": "real-fold", "format": FORMAT, "config": described, "seed": s,
            "fold": f, "data_sha256": data_sha256, "model": encoder.name,
            "model_sha256": encoder.identity, "cache_key": hidden_key,
            "versions": versions()}


def shape_of(config, shared: Shared, s: int, f: int) -> dict[str, Any]:
    """The lengths a well-formed record of fit (s, f) has."""
    src = np.flatnonzero(shared.domains == config.source)
    targets = targets_of(shared.domains, config.source)
    test_pos = test_positions(shared.labels, src, config, s)[f]
    return {"n_test": len(test_pos), "test_pos": test_pos.tolist(),
            "thetas": config.steps + 1, "targets": targets,
            "sizes": {d: int(np.sum(shared.domains == d)) for d in targets},
            "conditions": condition_names(targets), "arms": len(config.arms)}


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _vector(x: Any, n: int) -> bool:
    return isinstance(x, list) and len(x) == n and all(_finite(v) for v in x)


def _keyed(x: Any, keys) -> bool:
    return isinstance(x, dict) and list(x) == list(keys)


def well_formed_task(result: Any, shape: dict[str, Any], s: int, f: int) -> bool:
    """``result`` has every field of fit (s, f) that :func:`fold_task` writes, of the
    right length, every number finite (the theory of an arm may be None)."""
    from .fits import FAMILIES, FINETUNED, FORGET_THETAS, THEORY_COLUMNS
    n, T, conds = shape["n_test"], shape["thetas"], shape["conditions"]
    try:
        ok = (result["seed"] == s and result["fold"] == f
              and result["test_pos"] == shape["test_pos"]     # where its losses go
              and _keyed(result["rot"], FAMILIES)
              and all(isinstance(v, list) and len(v) == T and all(_vector(r, n) for r in v)
                      for v in result["rot"].values())
              and _keyed(result["gamma_eff"], FAMILIES)
              and all(_vector(v, T) for v in result["gamma_eff"].values())
              and _keyed(result["theory_real"], FAMILIES)
              and all(_keyed(v, THEORY_COLUMNS) and all(_vector(c, T) for c in v.values())
                      for v in result["theory_real"].values())
              and _keyed(result["shift"], shape["targets"])
              and all(_vector(result["shift"][d], shape["sizes"][d]) for d in shape["targets"])
              and _keyed(result["forget"], conds) and _keyed(result["forget_ood"], conds)
              and all(_keyed(result["forget"][c], FINETUNED)
                      and all(_vector(v, n) for v in result["forget"][c].values())
                      and _keyed(result["forget_ood"][c], FINETUNED)
                      and all(_vector(v, 2) for v in result["forget_ood"][c].values())
                      for c in conds)
              and _keyed(result["theory_forget_real"], [name for name, _ in FORGET_THETAS])
              and all(_keyed(v, ("raw", "orthonormalised")) and all(map(_finite, v.values()))
                      for v in result["theory_forget_real"].values()))
        if not ok:
            return False
        if not shape["arms"]:
            return "arms" not in result
        return _keyed(result["arms"], conds) and all(
            isinstance(rows, list) and len(rows) == shape["arms"] and all(
                _vector(r["F"], n) and r["fit"]["seed"] == s and r["fit"]["fold"] == f
                and r["fit"]["n"] == n and isinstance(r["fit"]["curve"], list)
                and len(r["fit"]["curve"]) >= 1
                and all(_vector(p, 2) for p in r["fit"]["curve"])
                and isinstance(r["theory"], list) and len(r["theory"]) == 2
                and (r["theory"][0] is None or _finite(r["theory"][0]))
                and isinstance(r["theory"][1], str) for r in rows)
            for rows in result["arms"].values())
    except (KeyError, TypeError, IndexError, AttributeError):
        return False


class TaskCache(Cache):
    """One JSON file per finished fit, named by the SHA-256 of its parameters
    (:func:`task_parameters`); the oodcalc.depth cache's conventions: a record is used
    only when its parameters match exactly and every field has the shape a fit writes
    (else it is recomputed and replaced atomically), an entry that is not a regular file
    is refused in one line, never pickle."""

    NAME = "real-tasks"

    def load(self, parameters: dict[str, Any], shape: dict[str, Any] | None = None
             ) -> dict[str, Any] | None:
        record = self._decoded(parameters)
        if record is None:
            return None
        if not (isinstance(record, dict) and record.get("parameters") == parameters
                and (shape is None or well_formed_task(record.get("result"), shape,
                                                       parameters["seed"],
                                                       parameters["fold"]))):
            self.rejected += 1
            return None
        return record

    def store(self, record: dict[str, Any]) -> None:
        try:
            json.dumps(record, allow_nan=False)
        except ValueError:       # a NaN or inf loss: recomputed next time, not stored
            return
        super().store(record)


def task_cache(cache_dir: Path | None, enabled: bool = True) -> TaskCache:
    """The task cache under the hidden states' directory (off without one)."""
    if cache_dir is None or not enabled:
        return TaskCache(enabled=False)
    return TaskCache(Path(cache_dir) / TaskCache.NAME)


# --- running them ---------------------------------------------------------------------

def collect(shared: Shared, config, parameters: Callable[[int, int], dict[str, Any]],
            cache: TaskCache, client=None, progress=None, workers: int = 1
            ) -> tuple[dict, int]:
    """{(s, f): result} for every fit, and how many came from the cache. Cached fits are
    read; the rest run here (in (s, f) order), in ``workers`` local processes (each given
    the shared data once, when it starts) or, with ``client`` (a
    dask.distributed.Client), on its cluster: the shared data scattered once to every
    worker, one task per fit. Each result is stored here as it arrives (a cluster's
    workers need no shared disk). Each fit's numbers depend on the config, seed and fold
    alone, so any order and any worker gives the serial numbers (start dask workers with
    ``--nthreads 1``: a fit sets torch's process-wide thread count)."""
    per_fold = 2 + len(condition_names(targets_of(shared.domains, config.source))) \
        * (1 + len(config.arms))
    advance = progress.advance if progress is not None else (lambda n=1: None)
    results: dict[tuple[int, int], dict[str, Any]] = {}
    todo = []
    for s in range(config.seeds):
        for f in range(config.folds):
            record = cache.load(parameters(s, f), shape_of(config, shared, s, f))
            if record is not None:
                results[(s, f)] = record["result"]
                advance(per_fold)
            else:
                todo.append((s, f))
    read = len(results)

    def keep(s: int, f: int, result: dict[str, Any], whole: bool = True) -> None:
        """Store a fit's result (``whole``: advance the progress by the fit, which ran
        elsewhere and could not report its steps)."""
        result = _plain(result)
        cache.store({"parameters": parameters(s, f), "result": result})
        results[(s, f)] = result
        if whole:
            advance(per_fold)

    if client is not None and todo:
        from dask.distributed import as_completed
        data = client.scatter(shared, broadcast=True, hash=False)
        futures = {client.submit(fold_task, data, config, s, f, pure=False): (s, f)
                   for s, f in todo}
        try:
            for future in as_completed(futures):
                keep(*futures[future], future.result())
        finally:
            for future in futures:          # an error or Ctrl-C: drop what has not run
                future.cancel()
    elif workers > 1 and len(todo) > 1:
        in_processes(shared, config, todo, min(workers, len(todo)), keep, len(results))
    else:
        for s, f in todo:
            keep(s, f, fold_task(shared, config, s, f, advance), whole=False)
    return results, read


#: A local worker process's shared data (set once, when the process starts).
_worker_shared: Shared | None = None


def _adopt(shared: Shared) -> None:
    """Worker initializer: keep the shared data; leave Ctrl-C to the main process, which
    ends the workers (else each would print a traceback)."""
    import signal
    global _worker_shared
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker_shared = shared


def _fold_in_worker(config, s: int, f: int) -> dict[str, Any]:
    return fold_task(_worker_shared, config, s, f)


def in_processes(shared: Shared, config, todo: list[tuple[int, int]], workers: int,
                 keep: Callable[[int, int, dict], None], cached: int) -> None:
    """The fits ``todo`` in ``workers`` spawned processes (as oodcalc.depth's collect)."""
    import concurrent.futures as cf
    import multiprocessing
    from concurrent.futures.process import BrokenProcessPool

    from ..depth.experiment import stop_pool
    from ..errors import ComputationError
    # spawn: a forked child would inherit torch's thread pools in an unknown state
    context = multiprocessing.get_context("spawn")
    done = 0
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=context,
                                initializer=_adopt, initargs=(shared,)) as pool:
        futures = {pool.submit(_fold_in_worker, config, s, f): (s, f) for s, f in todo}
        try:
            for future in cf.as_completed(futures):
                keep(*futures[future], future.result())
                done += 1
        except BrokenProcessPool:
            raise ComputationError(
                f"a worker process died (out of memory or killed?); {cached + done} fits "
                "are cached; rerun to continue, or use --workers 1") from None
        except BaseException:
            # Ctrl-C: stop at once instead of waiting for every queued fit; the fits that
            # finished are cached
            stop_pool(pool)
            raise
