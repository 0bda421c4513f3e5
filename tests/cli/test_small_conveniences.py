"""Small things a newcomer meets first: ``dir(sheaf_fmtl)`` lists the public API, ``graph_file`` alone
implies ``graph=file`` (and beside another graph is refused naming both keys), and ``--help-keys``
says what ``maps=auto`` picks as the code and the maps page do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import sheaf_fmtl
from sheaf_fmtl.cli import main
from sheaf_fmtl.config import ConfigError, RunConfig, load_config

ROOT = Path(__file__).resolve().parents[2]


def test_dir_lists_the_public_api() -> None:
    names = dir(sheaf_fmtl)
    assert set(sheaf_fmtl.__all__) <= set(names)
    assert {"load", "run", "Federation", "callbacks", "__version__", "__name__", "__doc__"} <= set(names)
    assert not [n for n in names if n.startswith("_") and not n.startswith("__")]  # no private names
    assert all(hasattr(sheaf_fmtl, n) for n in sheaf_fmtl.__all__)


def test_graph_file_alone_implies_graph_file(tmp_path: Path) -> None:
    assert load_config(None, ["graph_file=edges.txt"]).graph == "file"
    config = load_config(None, None, {"graph_file": "edges.txt"})
    assert (config.graph, config.graph_file) == ("file", "edges.txt")
    assert load_config(None, ["graph_file=edges.txt", "graph=file"]).graph == "file"
    refusal = r"'graph_file' = e.txt is read with graph = file, but config key 'graph' = star"
    with pytest.raises(ConfigError, match=refusal):
        load_config(None, ["graph_file=e.txt", "graph=star"])
    with pytest.raises(ConfigError, match="add graph='file'"):
        RunConfig(graph_file="e.txt")  # (a config object built whole: graph is its default, given)
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1\n1 2\n2 3\n3 0\n")
    config = load_config(None, [f"graph_file={edges}", "clients=4", "dataset=synthetic"])
    assert config.graph == "file"


#: What maps=auto picks, in the order the code tries them (algorithms/maps/auto.py), each as the
#: keys' help and the maps page's table word it.
AUTO = [
    ("redrawn", "neighbouring models of the same size"),
    ("features", "linear/logistic models"),
    ("proxy", "networks of different sizes on one input shape"),
    ("aligned", "networks of different sizes where no proxy can run"),
    ("learned", "tabular models of different sizes without feature ids"),
]


def test_help_keys_says_what_maps_auto_picks_as_the_docs_do(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--help-keys"]) == 0
    out = capsys.readouterr().out
    block = out[out.index("\nmaps ") : out.index("\nedge_weights ")]
    text = re.sub(r"\s+", " ", block)
    found = [text.find(f"{mode} for {words}") for mode, words in AUTO]  # (backticks dropped)
    assert -1 not in found and found == sorted(found), text
    page = (ROOT / "docs" / "concepts" / "maps.md").read_text()
    auto = page[page.index("\n## Auto") : page.index("\n## ", page.index("\n## Auto") + 1)]
    rows = [line for line in auto.splitlines() if line.startswith("| ")]
    for mode, words in AUTO:
        assert any(words.split()[0] in row and f"| `{mode}` |" in row for row in rows), (mode, rows)
