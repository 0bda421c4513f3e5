"""What a newcomer reads before running anything: ``reproduce --help`` says what each experiment
is, which data it needs and how many runs it makes; ``sweep`` without ``--grid`` is refused before
torch is imported."""

from __future__ import annotations

import subprocess
import sys

from sheaf_fmtl.cli import main
from sheaf_fmtl.experiments.paper import EXPERIMENTS
from sheaf_fmtl.experiments.reproduce import plan


def test_reproduce_help_lists_each_experiment_with_its_data_and_runs(capsys) -> None:  # noqa: ANN001
    assert main(["reproduce", "--help"]) == 0
    text = capsys.readouterr().out
    listing = text[text.index("experiments:") :]
    for name, exp in EXPERIMENTS.items():
        block = listing[listing.index(f"  {name}: {exp.title}") :].splitlines()[1:3]
        assert block[0] == f"    data: {', '.join(exp.datasets)} (files: sheaf-fmtl data describe NAME)"
        cells, _ = plan(exp, range(5), datasets=[exp.datasets[0]])  # one dataset's cells, as run
        runs = len(cells) * len(exp.datasets) if cells else None
        if runs is not None:  # the dataset's files are here: plan() counts the runs itself
            assert f"= {runs} (" in block[1], block
        assert block[1].startswith(f"    runs: {len(exp.settings)} settings x {len(exp.datasets)} datasets")


def test_sweep_without_grid_is_refused_before_torch_is_imported() -> None:
    code = (
        "import sys; from sheaf_fmtl.cli import main; code = main(['sweep']); "
        "print(code, 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["2", "False"], done
    assert "required: --grid" in done.stderr and len(done.stderr.strip().splitlines()) == 1
