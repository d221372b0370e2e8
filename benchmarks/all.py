"""Every benchmark, one after the other: ``python benchmarks/all.py`` (about 4 minutes on
2 cores; needs ``pip install torch==2.13.0``). Each script also runs on its own."""

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ["bench_peers.py", "bench_predict.py", "bench_dynamics.py", "bench_prompts.py",
           "bench_cli.py", "bench_scaling.py"]

if __name__ == "__main__":
    failed = []
    for script in SCRIPTS:
        print(f"\n=== python benchmarks/{script}", flush=True)
        if subprocess.run([sys.executable, str(HERE / script)]).returncode != 0:
            failed.append(script)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")
