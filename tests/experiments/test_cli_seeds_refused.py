"""``run --seeds`` where the config is refused: the refusal in one line and a failing exit status,
not an empty aggregate and exit 0."""

from __future__ import annotations

from sheaf_fmtl.cli import main


def test_run_seeds_whose_every_seed_is_refused_says_why_and_fails(tmp_path, capsys):
    argv = ["run", "--set", "rounds=2", "clients=4", "algorithm=dfedu", "--quiet", "--seeds", "0,1"]
    assert main([*argv, "--out", str(tmp_path / "seeds")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "every seed refused" in err[0] and "same model" in err[0], err


def test_sweep_whose_every_cell_is_refused_names_the_refusal(tmp_path, capsys):
    argv = ["sweep", "--set", "algorithm=dfedu", "clients=4", "rounds=2", "--quiet", "--grid", "lam=0.1,0.3"]
    assert main([*argv, "--out", str(tmp_path / "sweep")]) == 1
    err = capsys.readouterr().err
    assert "no cell finished" in err and "same model" in err, err
