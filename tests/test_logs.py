"""What a run writes to a log: one config tree, plain progress lines, the summary, no tips or escapes."""

import subprocess
import sys

from conftest import ROOT


def test_log_of_a_run_is_plain_and_complete(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "train.py"), "debug=tiny", "extras.print_config=true"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout + out.stderr
    assert "💡" not in text and "Tip:" not in text, "no Lightning advertising tips"
    assert "\r" not in text and "\x1b[" not in text, "no progress-bar carriage returns or escape codes in a file"
    assert out.stdout.count("task_name") == 1, "the config tree is printed once"
    assert "head=elastic_arc " in out.stdout and "data (synthetic)" in out.stdout, "the tree names the chosen options"
    progress = [line for line in text.splitlines() if "step " in line and "loss " in line]
    assert len(progress) == 6 and "step 6/6" in progress[-1], "a plain line per logging step (every step in debug=tiny)"
    assert sum("validation at step" in line for line in text.splitlines()) == 2
    (run_dir,) = (tmp_path / "logs" / "train" / "runs").iterdir()
    log = (run_dir / "train.log").read_text()
    assert "verification accuracy on identities never seen in training" in log, "the summary is in the log file"
    assert "step 6/6" in log and "💡" not in log
