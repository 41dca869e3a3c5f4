import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

MODULES = ", ".join(
    f"activelearn.prm.{name}"
    for name in (
        "backbones",
        "tokenization",
        "modeling",
        "data",
        "batching",
        "training",
        "scoring",
        "evaluation",
        "adaptation",
        "adapters",
        "freezing",
        "memory",
        "distributed",
    )
)


def test_prm_package_and_grading_import_no_django():
    code = (
        f"import sys, activelearn.prm, activelearn.grading, {MODULES}; "
        "bad = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.')); "
        "assert not bad, bad"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(ROOT)
    completed = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr
