"""The intervention arms on the real-text forgetting fine-tune (oodcalc.real.arms): each arm
does what it claims on the trained top (a tiny random BERT and generated reviews, as
tests/test_real.py), plain's record is untouched by running arms, the matched-loss
endpoint, the table, the figure and the CLI's refusals."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from oodcalc.cli import main
from oodcalc.depth.arms import Arm, parse
from oodcalc.real import arms as real_arms
from oodcalc.real.top import Rotation, Training

from test_real import TINY, Notes, generated_reviews, tiny_encoder, tiny_top_and_hidden

FT = Training(epochs=1, lr=3e-3, batch=8)


def states_equal(a, b) -> bool:
    return all(np.array_equal(x.numpy(), y.numpy())
               for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.fixture(scope="module")
def trained():
    top, hidden, labels, idx = tiny_top_and_hidden()
    from oodcalc.real.experiment import class_means
    pooled = hidden.pooled().astype(np.float64)
    source, tune = idx[:24], idx[24:]                  # contraception, the other domains
    return top, hidden, labels, source, tune, class_means(pooled[source], labels[source])


def intervention(trained, arm, rotation=None, top=None):
    base, hidden, labels, source, tune, means = trained
    top = copy.deepcopy(base) if top is None else top
    return top, real_arms.RealIntervention(arm, top, hidden, means, source, tune, rotation)


def test_plain_and_l2_at_zero_are_train_bit_for_bit(trained):
    """train_arm under plain (with or without the curve evaluations) and under l2 with μ = 0
    gives train's weights bit for bit; l2 with μ > 0 ends nearer θ₀."""
    from oodcalc.real.top import losses, train
    base, hidden, labels, source, tune, means = trained
    R = Rotation(np.arange(0, 8), np.arange(8, 16), 3 * math.pi / 4)
    ref = copy.deepcopy(base)
    train(ref, hidden, labels, tune, FT, 5, R)
    for arm in (Arm(), Arm("l2", 0.0)):
        top, iv = intervention(trained, arm)
        points = real_arms.train_arm(top, hidden, labels, tune, FT, 5, iv, R,
                                     curve=lambda: losses(top, hidden, labels, source).mean())
        assert states_equal(top, ref), arm.label
        assert len(points) == 1 + -(-len(tune) // 8)            # start + every step
    bare = copy.deepcopy(base)
    real_arms.train_arm(bare, hidden, labels, tune, FT, 5, None, R)
    assert states_equal(bare, ref)

    def distance(m):
        return sum(float((p - q).pow(2).sum()) for p, q in
                   zip(m.state_dict().values(), base.state_dict().values()))

    top, iv = intervention(trained, Arm("l2", 50.0))
    real_arms.train_arm(top, hidden, labels, tune, FT, 5, iv, R)
    assert not states_equal(top, ref) and distance(top) < 0.5 * distance(ref)


def test_replay_draws_its_share_from_the_source_unrotated(trained, monkeypatch):
    base, hidden, labels, source, tune, means = trained
    R = Rotation(np.arange(0, 8), np.arange(8, 16), math.pi)
    calls = []
    original = real_arms._batch

    def spy(h, idx, rotation):
        calls.append((np.array(idx), rotation))
        return original(h, idx, rotation)

    monkeypatch.setattr(real_arms, "_batch", spy)
    top, iv = intervention(trained, Arm("replay", 0.25))
    real_arms.train_arm(top, hidden, labels, tune, FT, 5, iv, R)
    target = [(i, r) for i, r in calls if r is R]
    replayed = [(i, r) for i, r in calls if r is None]
    assert len(target) == len(replayed) == -(-len(tune) // 8)
    for (t, _), (s, _) in zip(target, replayed):
        assert set(s) <= set(source) and not set(s) & set(tune)     # source, unrotated
        assert len(s) == min(len(t) - 1, round(0.25 * len(t)))       # round(λ·b) of b
    assert iv.replay_count(16) == 4 and iv.replay_count(1) == 0
    # plain draws none: a replay that drew nothing would fail the counts above
    assert real_arms.RealIntervention(Arm(), top, hidden, means, source, tune).replay_count(16) == 0


def test_sample_weights_read_the_cosine_to_the_source_mean(trained):
    import torch

    from oodcalc.real.top import _batch
    base, hidden, labels, source, tune, means = trained
    top, iv = intervention(trained, Arm("reweight"))
    h, mask = _batch(hidden, tune, None)
    w = iv.sample_weights(h, mask)
    pooled = hidden.pooled().astype(np.float64)[tune]
    centre = real_arms.source_centre(means)
    cos = pooled @ centre / np.linalg.norm(pooled, axis=1)
    assert np.allclose(w.numpy(), np.maximum(cos, 0) / np.maximum(cos, 0).mean(), atol=1e-6)
    assert float(w.mean()) == pytest.approx(1.0, abs=1e-6)             # normalised on tune
    tau = float(np.median(cos))
    top, drop = intervention(trained, Arm("drop-negative", tau))
    kept = drop.sample_weights(h, mask).numpy()
    assert np.array_equal(kept, (cos >= tau).astype(float)) and 0 < kept.sum() < len(kept)
    # θ = π turns every review against the source mean: every weight 0, no step is taken
    R = Rotation(*(lambda p: (p[0::2], p[1::2]))(np.arange(16)), math.pi)
    top, iv = intervention(trained, Arm("drop-negative", 0.0), R)
    real_arms.train_arm(top, hidden, labels, tune, FT, 5, iv, R)
    assert states_equal(top, base)
    assert torch.all(iv.sample_weights(*_batch(hidden, tune, R)) == 0)


@pytest.mark.parametrize("name", ["project-input", "project-qk", "project-value",
                                  "project-activations", "project-all"])
def test_projection_keeps_the_weights_action_on_what_it_protects(trained, name):
    """After a fine-tune under a projection arm, each projected weight's action on its
    protected directions is the start's to float32 round-off; plain moves it; the arm
    touches the weights it names and no other."""
    from oodcalc.real.top import train
    base, hidden, labels, source, tune, means = trained
    arm = parse(name)[1]
    top, iv = intervention(trained, arm)
    start = {k: v.clone() for k, v in top.state_dict().items()}
    real_arms.train_arm(top, hidden, labels, tune, FT, 5, iv)
    assert set(iv.projectors) == set(real_arms.projected(arm))
    assert real_arms.action_change(top, start, iv) < 1e-5          # measured ~1e-7
    plain = copy.deepcopy(base)
    train(plain, hidden, labels, tune, FT, 5)
    assert real_arms.action_change(plain, start, iv) > 1e-3


def test_a_projection_on_the_wrong_side_is_caught(trained, monkeypatch):
    """The same projectors applied on the output side (P W instead of W P) leave the action
    on the source span free: action_change sees it."""
    base, hidden, labels, source, tune, means = trained

    def left(self, saved):
        import torch
        with torch.no_grad():
            for w, before, P in saved:
                w.copy_((before.double() + P @ (w.double() - before.double())).to(w.dtype))

    monkeypatch.setattr(real_arms.RealIntervention, "after_backward", lambda self: None)
    monkeypatch.setattr(real_arms.RealIntervention, "after_step", left)
    top, iv = intervention(trained, Arm("project-input"))
    start = {k: v.clone() for k, v in top.state_dict().items()}
    real_arms.train_arm(top, hidden, labels, tune, FT, 5, iv)
    assert real_arms.action_change(top, start, iv) > 1e-3


def test_matched_levels_and_interpolation():
    # L falls 1 → 0.25 geometrically (halving), F rises by 0.1 a step
    curve = [(0.5 ** t, 0.1 * t) for t in range(3)]
    lv = real_arms.levels(1.0, 0.25, (0.25, 0.5, 1.0))
    assert lv == pytest.approx([0.25 ** 0.25, 0.5, 0.25])
    got = real_arms.matched(curve, lv)
    # 0.25^0.25 = 2^-0.5 lies halfway (in log) between steps 0 and 1
    assert got == pytest.approx([0.05, 0.1, 0.2])
    assert real_arms.matched(curve[:2], lv)[2] is None          # never reached
    assert real_arms.levels(1.0, 1.2, (0.5,)) is None           # plain did not lower it
    assert real_arms.matched(curve, None) == [None] * 3


TINY_ARMS = replace(TINY, seeds=1, folds=2, permutations=3, bootstrap=100)


@pytest.fixture(scope="module")
def arms_runs():
    from oodcalc.real.experiment import run
    encoder, reviews = tiny_encoder(), generated_reviews()
    plain = run(encoder, reviews, "f" * 64, TINY_ARMS, progress=Notes())
    notes = Notes()
    config = replace(TINY_ARMS, arms=parse("replay,project-input,l2"))
    with_arms = run(encoder, reviews, "f" * 64, config, progress=notes)
    return plain, with_arms, notes


def test_arms_leave_plains_record_as_it_was(arms_runs):
    """A run with arms holds a plain run's record unchanged, bit for bit (arms are a new
    entry, their parameters a new key); the plain arm's F is the forgetting table's F and
    its theory the table's raw-means theory."""
    plain, with_arms, notes = arms_runs
    assert "arms" not in plain and "arms" not in plain["parameters"]
    stripped = {k: v for k, v in with_arms.items() if k != "arms"}
    stripped["parameters"] = {k: v for k, v in with_arms["parameters"].items() if k != "arms"}
    assert json.dumps(stripped) == json.dumps(plain)
    assert notes.done == notes.totals
    table = with_arms["arms"]
    assert [r["label"] for r in table["conditions"][0]["rows"]] == \
        ["plain", "replay (share 0.25)", "project-input", "l2 (mu 0.01)"]
    for c, f in zip(table["conditions"], with_arms["forgetting"]):
        assert c["condition"] == f["condition"]
        p = c["rows"][0]
        assert p["F"]["mean"] == f["F"]["mean"]
        assert p["theory_F"] == pytest.approx(f["theory_F_raw"], rel=1e-9, abs=1e-15)
        assert p["ood_before"] == pytest.approx(f["ood_before"], abs=1e-12)
        for r in c["rows"]:
            assert r["theory_as"] and all(len(x["curve"]) > 1 for x in r["fits"])
            # one seed: no interval, no BH mark
            if r["versus_plain"] is not None:
                assert r["versus_plain"]["bh_rejected"] is None
        assert {r["label"]: r["theory_as"] for r in c["rows"]}["project-input"] \
            .startswith("project=both")


def test_arms_table_and_figure(arms_runs, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    saved = tmp_path / "arms.json"
    saved.write_text(json.dumps(arms_runs[1]))
    assert main(["reproduce", "real", "-i", str(saved), "-f", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "### Intervention arms of the forgetting fine-tune" in out
    rows = [line for line in out.split("Intervention arms")[1].splitlines()
            if line.startswith("| ") and "replay" in line]
    assert "this run has 1: no marks" in out and rows and not any("] *" in r for r in rows)
    assert main(["reproduce", "real", "-i", str(saved)]) == 0
    assert "Intervention arms" in capsys.readouterr().out
    png = tmp_path / "arms.png"
    assert main(["plot", "real-arms", "-i", str(saved), "-o", str(png)]) == 0
    assert png.stat().st_size > 10_000
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(arms_runs[0]))
    assert main(["plot", "real-arms", "-i", str(plain), "-o", str(png)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no intervention arms" in err


@pytest.mark.parametrize("args, fragment", [
    (["--arms", "bogus"], "unknown arm 'bogus'"),
    (["--arms", "replay:2"], "replay: expected a share"),
    (["--arms", "reweight:1"], "reweight takes no parameter"),
    (["--arms", "replay", "-i", "x.json"], "cannot be combined with --arms"),
])
def test_cli_refuses_a_bad_arm_in_one_line(args, fragment, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.json").write_text("{}")
    assert main(["reproduce", "real", "--quick", *args] if "-i" not in args
                else ["reproduce", "real", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("oodcalc: error: ") and fragment in err, err
