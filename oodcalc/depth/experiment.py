"""Gather the runs a table or a plot needs: from the cache, else train them (in worker
processes when asked), storing each result as it arrives."""

from __future__ import annotations

import concurrent.futures as cf
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from .cache import Cache
from .protocol import DepthConfig, canonical_gamma

__all__ = [
    "RULE_FT_STEPS", "Results", "SECONDS_PER_COST", "Task", "announcement", "collect",
    "ignore_interrupts", "plan", "run_task", "stop_pool",
]


#: ``progress(done, total, label)`` after each (config, seed) task.
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Task:
    """One pretraining and the fine-tunings (one per γ) that still need computing."""

    config: DepthConfig
    seed: int
    gammas: tuple[float, ...]

    @property
    def label(self) -> str:
        c = self.config
        return f"{c.arch}, {c.optimizer}, {c.layers} layer{'s' * (c.layers > 1)}, seed {self.seed}"

    @property
    def cost(self) -> float:
        """A rough relative cost, to start the long tasks first (× ``SECONDS_PER_COST``:
        seconds of one idle core)."""
        per_step = (2.0 if self.config.arch == "standard" else 1.0) * self.config.layers
        ft_steps = self.config.ft_steps
        finetune = 0.5 if ft_steps is None else 0.5 * ft_steps / RULE_FT_STEPS
        return per_step * (1 + finetune * len(self.gammas))


#: Steps of a fine-tuning to the stopping rule at ε = 0.01, the unit ``Task.cost`` counts
#: a fine-tuning of ``ft_steps`` steps in (docs/depth.json: mean T2 41-147 per config; the
#: 500-step fine-tunings there took 3-9 × as long as the rule's).
RULE_FT_STEPS = 100
#: Seconds of one idle core per unit of ``Task.cost`` (1-layer attention, SGD, ε = 0.01:
#: 10 seeds × 3 γ in about 2 minutes); for messages only.
SECONDS_PER_COST = 5.0


def announcement(tasks: Sequence[Task], cached: int, workers: int) -> str:
    """What ``collect`` will train and roughly how long it takes, before it starts."""
    runs = sum(len(t.gammas) for t in tasks)
    seconds = SECONDS_PER_COST * sum(t.cost for t in tasks) / max(1, min(workers, len(tasks)))
    from ..console import duration
    return (f"{runs} runs to train in {len(tasks)} trainings ({cached} cached), about "
            f"{duration(seconds)} with {workers} worker{'s' * (workers > 1)}")


def run_task(task: Task) -> list[dict[str, Any]]:
    """Worker entry point (module level, so a spawned process can import it)."""
    from .training import run_seed
    return run_seed(task.config, task.seed, task.gammas)


@dataclass
class Results:
    """Every record, by (config, seed, γ)."""

    records: dict[tuple[DepthConfig, int, float], dict[str, Any]] = field(default_factory=dict)
    computed: int = 0        # runs trained now (the rest came from the cache)

    def get(self, config: DepthConfig, seed: int, gamma: float) -> dict[str, Any]:
        return self.records[(config, seed, canonical_gamma(gamma))]


def plan(configs: Iterable[DepthConfig], seeds: Sequence[int], gammas: Sequence[float],
         cache: Cache) -> tuple[Results, list[Task]]:
    """What the cache already holds, and the tasks that compute the rest."""
    results, tasks = Results(), []
    gammas = [canonical_gamma(g) for g in gammas]
    for config in configs:
        for seed in seeds:
            missing = []
            for gamma in gammas:
                record = cache.load(config.run_parameters(seed, gamma))
                if record is None:
                    missing.append(gamma)
                else:
                    results.records[(config, seed, gamma)] = record
            if missing:
                tasks.append(Task(config, seed, tuple(missing)))
    return results, tasks


def collect(configs: Iterable[DepthConfig], seeds: Sequence[int], gammas: Sequence[float],
            cache: Cache, workers: int = 1, progress: Progress | None = None,
            executor: "cf.Executor | None" = None) -> Results:
    """Every (config, seed, γ) record: cached ones read, the others trained and stored.

    ``executor`` (e.g. ``dask.distributed.Client(...).get_executor()``) runs the (config,
    seed) tasks instead of ``workers`` local processes; the records come back here and
    this process's cache stores them, so a cluster's workers need no shared disk. Each
    task's numbers depend on its config and seed alone: any executor gives the serial
    numbers. Training sets torch's (process-wide) thread count, so start dask workers with
    ``--nthreads 1`` (one task per process at a time; the test's in-process cluster showed
    no difference, which is not a guarantee)."""
    from ..extras import require
    results, tasks = plan(configs, seeds, gammas, cache)
    if not tasks:
        return results
    runs = sum(len(t.gammas) for t in tasks)
    require("torch", "nn", f"the depth experiment ({runs:,} run{'s' * (runs > 1)} to train, "
                           f"first: {tasks[0].label})")
    tasks.sort(key=lambda t: -t.cost)

    def store(task: Task, records: list[dict[str, Any]], done: int) -> None:
        for record in records:
            cache.store(record)
            results.records[(task.config, task.seed, record["parameters"]["gamma"])] = record
        results.computed += len(records)
        if progress is not None:
            progress(done, len(tasks), task.label)

    if progress is not None:
        progress(0, len(tasks), announcement(tasks, len(results.records), workers))
    if executor is not None:
        futures = {executor.submit(run_task, task): task for task in tasks}
        try:
            for done, future in enumerate(cf.as_completed(futures), 1):
                store(futures[future], future.result(), done)
        finally:
            for future in futures:           # an error or Ctrl-C: drop what has not run
                future.cancel()
        return results
    if workers <= 1 or len(tasks) == 1:
        for done, task in enumerate(tasks, 1):
            store(task, run_task(task), done)
        return results

    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from ..errors import ComputationError
    # spawn: a forked child would inherit torch's thread pools in an unknown state
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=context,
                             initializer=ignore_interrupts) as pool:
        futures = {pool.submit(run_task, task): task for task in tasks}
        try:
            for done, future in enumerate(cf.as_completed(futures), 1):
                store(futures[future], future.result(), done)
        except BrokenProcessPool:
            raise ComputationError(
                f"a worker process died (out of memory or killed?); {results.computed} runs "
                "finished and are cached; rerun to continue, or use --workers 1") from None
        except BaseException:
            # Ctrl-C (only this process takes it): stop at once instead of waiting for
            # every queued run; the runs that finished are cached
            stop_pool(pool)
            raise
    return results


def stop_pool(pool) -> None:
    """End a ``ProcessPoolExecutor`` at once: drop its queue and terminate its processes
    (killed if SIGTERM is not taken within a second, as seen in tests)."""
    running = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)           # (forgets the processes)
    for process in running:
        process.terminate()
    for process in running:
        process.join(timeout=1)
        if process.is_alive():
            process.kill()
            process.join(timeout=5)


def ignore_interrupts() -> None:
    """Worker initializer: Ctrl-C reaches the whole process group; the main process
    handles it and ends the workers (else each would print a traceback)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
