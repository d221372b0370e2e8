"""``oodcalc sequence``: pretrain, then fine-tune on a sequence of parallel shifts, and
what every stage did to every domain (continual-learning metrics in loss)."""

from __future__ import annotations

import json
import sys
from typing import Annotated, List, Optional

import typer

from .app import app
from .setting_options import L2, Eps, EpsFt, Eta, EtaFt, FtSteps, MaxSteps, Project, Replay, \
    Weights, build_protocol, interventions

#: What a stage's text may carry after its γ's: ``--then "1,0.5 replay=0.2 project=key"``.
STAGE_KEYS = ("replay", "l2", "project", "weights")


@app.command()
def sequence(
    gamma: Annotated[Optional[str], typer.Option("--gamma", metavar="G1,G2,...",
        help="The first shift (a parallel shift): γ_k = ⟨v_k, u_k⟩ in [-1, 1], one per "
             "feature (K = count).", rich_help_panel="Shifts")] = None,
    then: Annotated[Optional[List[str]], typer.Option("--then", metavar="G1,G2,...",
        help="The next shift, as many values as --gamma: fine-tuning continues on it from "
             "where the previous stage ended. Repeat for more stages. Interventions for "
             "this stage alone may follow the values: \"1,0.5 replay=0.2 project=key\" "
             "(keys replay, l2, project, weights).",
        rich_help_panel="Shifts")] = None,
    eps: Eps = None, eta: Eta = None, eta_ft: EtaFt = None, max_steps: MaxSteps = None,
    eps_ft: EpsFt = None, ft_steps: FtSteps = None,
    replay: Replay = None, l2: L2 = None, project: Project = None, weights: Weights = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: R, steps, "
        "metrics with their definitions, the joint reference.")] = False,
) -> None:
    """Fine-tune on a sequence of shifts, one after the other, exactly.

    The interventions apply to every stage: replay spreads λ equally over every earlier
    domain (V, U1, ...), --project projects off the span of every earlier domain's
    features, --l2 pulls toward the weights at the start of the stage.

    Example: oodcalc sequence --gamma 1,-0.9 --then 1,0.5
    """
    from ..continual import sequence as run_sequence
    from ..errors import InputError
    from ..finetune.sequence import parallel_shifts
    from . import options

    if gamma is None:
        raise InputError("--gamma", "nothing", "give the first shift, e.g. --gamma 1,-0.9 "
                         "(and each later one with --then)")
    texts = [gamma, *(then or [])]
    names = ["--gamma"] + [f"--then {i}" if len(then) > 1 else "--then"
                           for i in range(1, len(texts))]
    parsed = [stage_text(name, text) for name, text in zip(names, texts)]
    gammas = [values for values, _ in parsed]
    protocol = build_protocol(eps, eta, eta_ft, max_steps, eps_ft, ft_steps,
                              finetuning=interventions(replay, l2, project, weights))
    options.name_parameters({"K": ("--gamma", f"{len(gammas[0])} values"),
                             "lower K": "give fewer --gamma values"})
    stages = [extra or None for _, extra in parsed]
    shifts = parallel_shifts(gammas, names=names)
    stages = stages if any(stages) else None
    from ..continual import sequence_estimate
    from ..errors import ComputationError
    from .progress import StepProgress, announce
    try:
        seconds, words = sequence_estimate(shifts, protocol)
    except ComputationError:             # the sequence refuses it, in its own words
        seconds, words = 0.0, ""
    announce("sequence", seconds, f" ({words})")
    if as_json or not sys.stderr.isatty():
        result = run_sequence(shifts, protocol, stages=stages)
    else:                                # a bar on stderr if the run lasts a while
        with StepProgress() as progress:
            result = run_sequence(shifts, protocol, stages=stages, progress=progress)
    if as_json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        render(result)


def stage_text(name: str, text: str) -> tuple[list[float], dict]:
    """``"1,0.5 replay=0.2 project=key"``: the stage's γ's and its own interventions (as
    :func:`~oodcalc.cli.setting_options.interventions` reads the options)."""
    from ..errors import InputError
    from ..setting import Protocol
    from . import options

    first, *rest = text.split() or [text]
    given = {}
    for token in rest:
        key, sep, value = token.partition("=")
        if not sep or key not in STAGE_KEYS or key in given:
            raise InputError(name, repr(text), f"after the values, give key=value with keys "
                             f"{', '.join(STAGE_KEYS)}, each once, e.g. \"1,0.5 replay=0.2\"")
        given[key] = value
    values = options.numbers(name, first)
    extra = interventions(*(given.get(key) for key in STAGE_KEYS))
    try:
        Protocol(**extra)                     # the ranges, named by this option
    except InputError as error:
        key = error.what.strip("⟦⟧")
        raise InputError(name, repr(text), f"{key}={given[key]}: {error.accepted}") from None
    return values, extra


def render(result) -> None:
    import sys

    from rich.markup import escape
    from rich.table import Table

    from ..console import make_console, say
    from .render import TABLE, fmt

    console = make_console()
    S, p = result.S, result.parameters
    rule = (f"exactly {p['ft_steps']} steps" if p["ft_steps"]
            else f"every e_k <= {p['eps_ft']:g}")
    say(console, f"Pretraining on V: T1 = {result.T1} steps; then fine-tuning on "
        f"{S} shift{'s' if S > 1 else ''} in turn, each stage until {rule} on its own "
        f"domain (eta_ft = {p['eta_ft']:g}).")
    for i, gamma in enumerate(p["gammas"], 1):
        say(console, f"  U{i}: γ = {', '.join(f'{g:g}' for g in gamma)}")
    console.print()
    say(console, escape("Loss L_j = (1/K) Σ_k e_k on every domain (R[i][j], row i, "
                        "column j):"))
    table = Table(**TABLE)
    table.add_column("after", no_wrap=True)
    for j in range(S + 1):
        table.add_column("source V" if j == 0 else f"U{j}", justify="right", no_wrap=True)
    table.add_column("steps", justify="right", no_wrap=True)
    for i in range(S + 1):
        label = "pretraining" if i == 0 else f"stage {i}"
        steps = str(result.T1) if i == 0 else str(result.steps[i - 1]) + (
            "" if result.reached[i - 1] else " (rule not met)")
        table.add_row(label, *(fmt(x, 4) for x in result.R[i]), steps)
    joint = result.joint
    table.add_row("joint (reference)", *(fmt(x, 4) for x in joint.losses),
                  str(joint.steps) + ("" if joint.reached else " (rule not met)"))
    console.print(table)
    say(console, f"Untrained model (Q = 0): L = {fmt(result.untrained_loss[0], 4)} on every "
        "domain. Joint: GD on the mean loss of every domain from Q^(T1), to the rule on "
        "every domain.")
    console.print()
    say(console, "Continual-learning metrics (accuracy read as −loss; mammoth, avalanche):")
    for metric in result.metrics.values():
        value = metric.undefined if metric.value is None else fmt(metric.value, 4, "+")
        say(console, f"  {metric.name}: {value}", indent=4)
        say(console, f"    {escape(metric.definition)}", indent=6, style="dim")
    for i, met in enumerate(result.reached, 1):
        if not met and not p["ft_steps"]:
            print(f"oodcalc: warning: stage {i} did not meet its rule within "
                  f"{p['max_steps']:,} steps; the next stage starts where it stopped",
                  file=sys.stderr)
    if not joint.reached:
        print(f"oodcalc: warning: the joint reference did not meet the rule on every domain "
              f"within {p['max_steps']:,} steps", file=sys.stderr)
