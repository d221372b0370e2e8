"""Every benchmark, one after the other: ``python benchmarks/all.py`` (the PyTorch, JAX and
Numba baselines are optional: a missing one is skipped with a message). Each script also runs on its own."""

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ["bench_peers.py", "bench_predict.py", "bench_dynamics.py", "bench_prompts.py",
           "bench_cli.py", "bench_scaling.py", "bench_derive.py"]

NEEDS_TORCH = {"bench_dynamics.py", "bench_prompts.py"}   # their baseline is PyTorch

if __name__ == "__main__":
    import importlib.util
    failed = []
    has_torch = importlib.util.find_spec("torch") is not None
    for script in SCRIPTS:
        if script in NEEDS_TORCH and not has_torch:
            print(f"\n=== skipped benchmarks/{script}: pip install torch==2.13.0")
            continue
        print(f"\n=== python benchmarks/{script}", flush=True)
        if subprocess.run([sys.executable, str(HERE / script)]).returncode != 0:
            failed.append(script)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")
