"""Every script in examples/ runs and says what it promises."""

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))
SMALL_ARGS = {"own_features.py": ["{tmp}"], "phase_diagram.py": ["{tmp}/phase.png", "21"],
              "claim8_rules.py": ["--n", "50", "--K", "2,3"]}


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script, tmp_path):
    args = [a.format(tmp=tmp_path) for a in SMALL_ARGS.get(script.name, [])]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
