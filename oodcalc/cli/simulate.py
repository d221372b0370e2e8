"""``oodcalc simulate``: train a simulator on a geometry and protocol, optionally beside the
theory (``--compare``)."""

from __future__ import annotations

import json
from functools import partial
from enum import Enum
from typing import Annotated, Optional

import numpy as np
import typer

from .. import limits
from ..errors import InputError
from . import options
from .app import app
from .setting_options import (L2, Dimension, Eps, EpsFt, Eta, EtaFt, Features, FtSteps, Gamma,
                              MaxSteps, MeanQuery, NumFeatures, Ood, Orthogonal, Overlap,
                              Project, Replay, Theta, Tolerance, Weights, build_setting,
                              interventions)

SIM_PANEL = "Simulator"
Text = Optional[str]


class Simulator(str, Enum):
    population = "population"
    prompts = "prompts"


class Stop(str, Enum):
    population = "population"
    heldout = "heldout"


def thin(length: int, rows: int) -> list[int]:
    """About ``rows`` step indices from 0 to length − 1, always both ends."""
    return sorted(set(np.linspace(0, length - 1, min(rows, length)).round().astype(int)))


def trajectory_json(trajectories: dict) -> dict:
    return {name: np.asarray(v).tolist() for name, v in trajectories.items()}


def render(report, rows: int, comparison=None) -> None:
    from rich import box
    from rich.table import Table

    from ..geometry import describe_text as describe_geometry
    from ..console import make_console, say
    from .render import describe_interventions, fmt, intervened

    from rich.markup import escape

    console = make_console()
    p = report.parameters
    K = p["K"]
    say(console, f"[bold]oodcalc simulate[/bold] · {escape(describe_geometry(p['geometry']))}")
    say(console, f"{escape(report.source)}; K = {K}, d = {p['d']}, ε = {fmt(p['eps'])}, "
                 f"η = {fmt(p['eta'])}, η_ft = {fmt(p['eta_ft'])}")
    if intervened(p):
        say(console, f"fine-tuning with {escape(describe_interventions(p))}, done on Q")
    say(console, f"T1 = {report.pretrain.T1}: α = {fmt(report.pretrain.alpha)}, "
                 f"β = {fmt(report.pretrain.beta)}, max e_k = "
                 f"{fmt(float(report.pretrain.error.max()))}; OOD loss at T1 = "
                 f"{fmt(float(report.ood.error.sum() / K))}; T2 = {report.finetune.T2}; "
                 f"F = {report.F:+.5g}")

    table = Table(title="Trajectories (α, β: means over features and pairs; L: Σe_k/K)",
                  title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("phase", "t", "α", "β", "L on the trained features", "L_tr on V"):
        table.add_column(name, justify="right")

    def stats(z):
        off = z[~np.eye(K, dtype=bool)]
        return fmt(float(np.mean(np.diag(z)))), fmt(float(off.mean()))

    from ..model import errors_and_gradient

    # The losses from the logits read the features' Gram matrices (overlapping
    # features; the description carries them), the identity for orthonormal ones.
    grams = {name: None if name not in p["geometry"] else np.array(p["geometry"][name])
             for name in ("G_V", "G_U")}

    def loss(z, G):
        return errors_and_gradient(z, G)[0].sum() / K

    pre = report.trajectories["pretrain"]
    for t in thin(len(pre), rows):
        a, b = stats(pre[t])
        source = loss(pre[t], grams["G_V"])
        table.add_row("pretrain", str(t), a, b, fmt(source), fmt(source))
    ood, src = report.trajectories["finetune_ood"], report.trajectories["finetune_source"]
    for t in thin(len(ood), rows):
        a, b = stats(ood[t])
        table.add_row("fine-tune", str(report.pretrain.T1 + t), a, b,
                      fmt(loss(ood[t], grams["G_U"])), fmt(loss(src[t], grams["G_V"])))
    console.print(table)
    table = Table(box=box.SIMPLE_HEAD)
    for name in ("k", "F_k", "L_{v_k} trend along fine-tuning"):
        table.add_column(name)
    for f in report.forgetting:
        table.add_row(str(f.k), f"{f.F_k:+.4g}", escape(f.trend))
    console.print(table)

    if comparison is not None:
        table = Table(title="Theory (exact population dynamics, closed forms) beside the "
                            "simulation, field by field", title_justify="left",
                      box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
                      padding=(0, 1, 0, 0))
        table.add_column("field", no_wrap=True)
        # Long texts (conditions) in these two are cut; numbers and the diffs never are.
        text_width = max(12, min(20, (console.width - 52) // 2))
        for name in ("theory", "simulation"):
            table.add_column(name, justify="right", max_width=text_width, overflow="ellipsis",
                             no_wrap=True)
        for name in ("max |diff|", "max rel"):
            table.add_column(name, justify="right", no_wrap=True)

        def show(v):
            if isinstance(v, list):
                if v and isinstance(v[0], list):
                    return f"[{len(v)}×{len(v[0])} matrix]"
                if v and len(v) <= 4:
                    return ", ".join(show(x) for x in v)
                return f"[{len(v)} values]" if v else "—"
            if isinstance(v, float):
                return fmt(v)
            return "—" if v is None else escape(str(v))

        def short(name):
            return escape(name.replace("forgetting.per_feature", "F")
                          .replace("at_alpha_star", "at α*"))
        for d in comparison:
            if d.field.endswith("].k"):
                continue
            if d.max_abs is not None:
                table.add_row(short(d.field), show(d.theory), show(d.simulation),
                              f"{d.max_abs:.3g}", f"{d.max_rel:.3g}")
            elif d.agree is not None:
                table.add_row(short(d.field), show(d.theory), show(d.simulation),
                              "same" if d.agree else "[red]differs[/red]", "")
            else:
                table.add_row(short(d.field), show(d.theory), show(d.simulation), "", "")
        console.print(table)


def announce_simulation(setting, tokens: int = 0, **prompts) -> None:
    """Say on stderr how long a long simulation will take and the memory its stored
    iterates hold (predict's announcement), after the simulator's own refusals."""
    from .. import estimates
    from .progress import announce
    geo, proto, K = setting.geometry, setting.protocol, setting.K
    shape = {"diagonal": geo.known_diagonal,
             "M": geo.M if geo.known_diagonal is None else None,
             "grams": None if geo.orthonormal else (geo.G_V, geo.G_U)}
    limits.check_simulation(K, proto, **shape)
    t1, t2 = estimates.simulation_steps(K, proto, **shape)
    seconds = estimates.simulation_seconds(K, geo.d, t1, t2, tokens)
    if prompts:
        memory = estimates.prompts_bytes(K, geo.d, prompts["N"], prompts["n_batch"],
                                         prompts["holdout"] or 0, proto.eps, proto.eta,
                                         proto.eta_ft, proto.max_steps,
                                         prompts["holdout"] is not None, proto.ft_steps)
    else:
        memory = estimates.population_bytes(K, geo.d, proto.eps, proto.eta, proto.eta_ft,
                                            proto.max_steps, proto.ft_steps)
    announce("simulate", seconds, f" (≈ {t1:,.0f} + {t2:,.0f} steps of GD on the "
             f"{geo.d}×{geo.d} Q, about {limits.size(memory)} of memory)")


@app.command()
def simulate(
    gamma: Gamma = None, overlap: Overlap = None, theta: Theta = None,
    mean_query: MeanQuery = False,
    orthogonal: Orthogonal = False, features: Features = None, ood: Ood = None,
    K: NumFeatures = None, d: Dimension = None, tol: Tolerance = None,
    eps: Eps = None, eta: Eta = None, eta_ft: EtaFt = None, max_steps: MaxSteps = None,
    eps_ft: EpsFt = None, ft_steps: FtSteps = None,
    replay: Replay = None, l2: L2 = None, project: Project = None, weights: Weights = None,
    simulator: Annotated[Simulator, typer.Option("--simulator", "-s",
        help="population: GD on the full Q with the population loss (ground truth); "
             "prompts: GD on sampled prompts of N tokens.", rich_help_panel=SIM_PANEL)]
        = Simulator.population,
    N: Annotated[Text, typer.Option("--N", "-N", metavar="INT",
        help="prompts: tokens per prompt.", show_default="32", rich_help_panel=SIM_PANEL)] = None,
    batch: Annotated[Text, typer.Option("--batch", metavar="INT",
        help="prompts: prompts per GD step.", show_default="1024",
        rich_help_panel=SIM_PANEL)] = None,
    fixed_sample: Annotated[bool, typer.Option("--fixed-sample",
        help="prompts: one fixed sample of --batch prompts per phase (full-batch GD on it) "
             "instead of fresh mini-batches every step.", rich_help_panel=SIM_PANEL)] = False,
    balanced: Annotated[bool, typer.Option("--balanced",
        help="prompts: each prompt holds every feature exactly N/K times (--N a multiple of "
             "K) instead of N i.i.d. tokens; its error averaged over tasks is then the "
             "population e_k for any N.", rich_help_panel=SIM_PANEL)] = False,
    seed: Annotated[Text, typer.Option("--seed", metavar="INT",
        help="prompts: seed of np.random.SeedSequence.", show_default="0",
        rich_help_panel=SIM_PANEL)] = None,
    stop: Annotated[Stop, typer.Option("--stop",
        help="prompts: evaluate the stopping rule on the population errors of the current Q, "
             "or on a held-out sample of prompts.", rich_help_panel=SIM_PANEL)] = Stop.population,
    holdout: Annotated[Text, typer.Option("--holdout", metavar="INT",
        help="prompts with --stop heldout: held-out prompts.", show_default="4096",
        rich_help_panel=SIM_PANEL)] = None,
    compare: Annotated[bool, typer.Option("--compare",
        help="Also run the theory and show both side by side with their differences.")] = False,
    rows: Annotated[Text, typer.Option("--rows", metavar="INT",
        help="Trajectory rows shown per phase.", show_default="8")] = None,
    trajectories: Annotated[bool, typer.Option("--trajectories",
        help="With --json: include every step's logits and losses.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object; K × K "
        "matrices in full up to K = 16, summarised above.")] = False,
    arrays: Annotated[Optional[str], typer.Option("--arrays", metavar="FILE.npz",
        help="Also write every K × K matrix and trajectory in full to FILE.npz (atomically, "
             "no pickles; with --compare the theory's under theory.NAME).")] = None,
) -> None:
    """Train a simulator (no closed forms inside) and report in the theory's schema.

    Examples: oodcalc simulate --gamma 1,-0.9 --compare;
    oodcalc simulate --gamma 1,-0.9 --replay 0.5 --compare;
    oodcalc simulate --overlap 0.8 --gamma 1,0.5 --project key --compare;
    oodcalc simulate --gamma 1,-0.9 -s prompts --N 64 --seed 3 --json;
    oodcalc simulate --overlap 0.5 --gamma 1,0.5 -s prompts --N 16 --balanced --compare
    """
    n_rows = options.integer("--rows", rows, 2) or 8
    if arrays is not None:
        from ..io import check_output
        check_output(arrays, "--arrays", suffixes=(".npz",))    # before the run
    prompt_options = {"--N": N, "--batch": batch, "--seed": seed, "--holdout": holdout}
    geometry = (gamma, theta, K, mean_query, orthogonal, features, ood, d, tol, eps, eta, eta_ft,
                max_steps)
    also = [limits.check_predict] if compare else []     # the theory runs after it
    finetuning = interventions(replay, l2, project, weights)   # the simulator does them on Q
    if simulator is Simulator.population:
        given = [(name, repr(v)) for name, v in prompt_options.items() if v is not None]
        given += [("--fixed-sample", "the flag")] if fixed_sample else []
        given += [("--balanced", "the flag")] if balanced else []
        given += [("--stop", stop.value)] if stop is not Stop.population else []
        if given:
            raise InputError(given[0][0], given[0][1], "only --simulator prompts takes "
                             "--N, --batch, --fixed-sample, --balanced, --seed, --stop and "
                             "--holdout")
        from ..simulate import simulate_population
        setting = build_setting(*geometry, checks=[limits.check_population, *also],
                                eps_ft=eps_ft, ft_steps=ft_steps, finetuning=finetuning,
                                overlap=overlap)
        announce_simulation(setting)
        report = simulate_population(setting)
    else:
        if holdout is not None and stop is not Stop.heldout:
            raise InputError("--holdout", holdout, "only used with --stop heldout")
        n_tokens = options.integer("--N", N, 1) or 32
        n_batch = options.integer("--batch", batch, 1) or 1024
        n_holdout = options.integer("--holdout", holdout, 2) or 4096
        root_seed = options.integer("--seed", seed, 0) or 0

        setting = build_setting(*geometry, checks=[
            partial(limits.check_prompts, N=n_tokens, batch=n_batch, holdout=n_holdout,
                    heldout=stop is Stop.heldout), *also], eps_ft=eps_ft, ft_steps=ft_steps,
            finetuning=finetuning, overlap=overlap)
        if n_holdout < setting.K:
            raise InputError("--holdout", holdout, f"expected an integer >= K = {setting.K}")
        from ..simulate import simulate_prompts
        from ..simulate.prompts import check_balanced
        check_balanced(balanced, n_tokens, setting.K)      # before the announcement
        announce_simulation(setting, n_tokens * n_batch, n_batch=n_batch, N=n_tokens,
                            holdout=n_holdout if stop is Stop.heldout else None)
        report = simulate_prompts(setting, N=n_tokens, batch=n_batch,
                                  resample=not fixed_sample, seed=root_seed, stop=stop.value,
                                  holdout=n_holdout, balanced=balanced)
    comparison = None
    if compare:
        from ..compare import compare as compare_reports
        from ..prediction import predict
        theory = predict(setting)
        comparison = compare_reports(theory, report)
    if arrays is not None:
        from ..io import write_npz_atomic
        full = report.arrays()
        if comparison is not None:
            full |= {f"theory.{name}": value for name, value in theory.arrays().items()}
        write_npz_atomic(arrays, full, option="--arrays")
    if as_json:
        out = report.to_dict()
        if trajectories:
            out["trajectories"] = trajectory_json(report.trajectories)
        if comparison is not None:
            from ..report import jsonable
            out = {"parameters": out["parameters"], "theory": theory.to_dict(),
                   "simulation": out,
                   "differences": jsonable([d.to_dict() for d in comparison])}
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        render(report, n_rows, comparison)
