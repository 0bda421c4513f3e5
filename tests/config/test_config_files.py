"""Config loading on small inputs: a file with overrides, refusals of what is no mapping or no
file, exponent notation read as a number."""

from __future__ import annotations

import pytest

from sheaf_fmtl.config import ConfigError, load_config


def test_config_file_and_overrides(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("lam: 0.5\ndata:\n  relatedness: 0.2\n")
    c = load_config(f, ["data.groups=2", "rounds=3"])
    assert c.lam == 0.5 and c.rounds == 3 and c.data == {"relatedness": 0.2, "groups": 2}
    f.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(f)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")


def test_exponent_notation_is_read_as_a_number(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("lam: 1e-3\n")
    assert load_config(f, ["alpha=2e-2"]).lam == 1e-3
    assert load_config(None, ["alpha=2e-2"]).alpha == 0.02
