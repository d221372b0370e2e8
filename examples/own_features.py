"""Use your own feature vectors from a file.

    python examples/own_features.py [DIRECTORY]

Writes two d × K matrices (each column a feature, orthonormal columns) as .npy and .csv,
then asks the theory about them, through the Python API and through the command line.
"""

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import oodcalc as oc

rng = np.random.default_rng(2026)                      # the seed makes the files reproducible
d, K = 6, 3
V, _ = np.linalg.qr(rng.standard_normal((d, K)))       # orthonormal columns
U, _ = np.linalg.qr(V + 0.6 * rng.standard_normal((d, K)))

folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
np.save(folder / "V.npy", V)
np.savetxt(folder / "U.csv", U, delimiter=",")

geometry = oc.from_files(folder / "V.npy", folder / "U.csv")
report = oc.predict(oc.Setting(geometry))
print("M = VᵀU =\n", np.round(geometry.M, 3))
print("OOD error per feature at T1:", np.round(report.ood.error, 4))
print("F_k after fine-tuning:", [f"{f.F_k:+.2e}" for f in report.forgetting])

# the same from the command line, as JSON
out = subprocess.run(["oodcalc", "predict", "--features", str(folder / "V.npy"),
                      "--ood", str(folder / "U.csv"), "--json"],
                     capture_output=True, text=True, check=True)
print("CLI says F =", __import__("json").loads(out.stdout)["forgetting"]["F"])
