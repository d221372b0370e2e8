"""Will fine-tuning on this shift make the model forget, and which features?

    python examples/will_it_forget.py 0.8,-0.9,0.3

Prints, per source feature, the theorem's verdict (claim 8) with its inequality and what
the exact population dynamics do: F_k and whether L_{v_k} rose or fell all along.
"""

import sys

import oodcalc as oc

gamma = [float(g) for g in (sys.argv[1] if len(sys.argv) > 1 else "0.8,-0.9,0.3").split(",")]
setting = oc.Setting(oc.parallel_shift(gamma), oc.Protocol(eps=0.01, eta=0.1))
report = oc.predict(setting)

print(f"γ = {gamma}, ε = {setting.protocol.eps}, η = {setting.protocol.eta}: "
      f"T1 = {report.pretrain.T1}, T2 = {report.finetune.T2}")
for f in report.forgetting:
    print(f"  v{f.k}: {f.regime:<17} ({f.condition});  exact F_{f.k} = {f.F_k:+.3e}, "
          f"loss {f.trend}")
verdict = "forgets" if report.F > 0 else "improves (backward transfer)"
print(f"Overall the source {verdict}: F = {report.F:+.3e}")
