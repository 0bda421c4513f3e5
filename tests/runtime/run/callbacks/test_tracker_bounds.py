"""The MLflow and W&B loggers answer within a bound, in one line: a destination they cannot use
is refused before the run starts (a closed port, a server that never answers, a URI of no
store's kind, a database store without its package, an empty experiment), and a server that fails
during the run ends it within seconds, naming the logger."""

from __future__ import annotations

import http.server
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import sheaf_fmtl
from sheaf_fmtl.cli import main
from sheaf_fmtl.config import ConfigError
from sheaf_fmtl.runtime.run.callbacks import reach, wandb_logger
from sheaf_fmtl.runtime.run.callbacks.reach import TrackerError, environment

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

SMALL = ["clients=3", "rounds=2", "eval_every=1"]
#: The answer's bound in these tests: the probe's (5 s) and a start's, with room for a busy machine.
BOUND = 12.0


@pytest.fixture(autouse=True)
def _no_tracker_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in ("MLFLOW_TRACKING_URI", "WANDB_MODE", "WANDB_DIR", "WANDB_BASE_URL", "WANDB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # (no W&B login or settings of this machine's)
    yield
    if "wandb" in sys.modules:  # (W&B keeps the settings it first read for the whole process)
        sys.modules["wandb"].teardown()


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on (bound, then closed): connections to it are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A local port that takes connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield int(s.getsockname()[1])


class _Unavailable(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the handler's name
        self.send_response(503)
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def unavailable() -> Iterator[str]:
    """A local HTTP server that answers every request with 503 (it answers the probe)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Unavailable)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _refused(args: list[str], out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The one line ``run`` is refused with, before it starts (nothing written), within the bound."""
    start = time.monotonic()
    code = main(["run", "--out", str(out), "--quiet", "--set", *SMALL, *args])
    took = time.monotonic() - start
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in lines[0], lines
    assert took < BOUND and not out.exists(), (took, out)
    return lines[0]


def test_mlflow_refuses_what_it_cannot_use_in_one_line_before_the_run(
    tmp_path, capsys, closed_port, monkeypatch
):
    pytest.importorskip("mlflow", reason="the MLflow logger's tests need pip install 'sheaf-fmtl[mlflow]'")
    uri = f"http://127.0.0.1:{closed_port}"
    said = _refused(["log_mlflow=true", f"mlflow_tracking_uri={uri}"], tmp_path / "a", capsys)
    assert said.startswith(
        f"sheaf-fmtl: error: --set mlflow_tracking_uri={uri}: no MLflow server answers there"
    )
    assert "(connection refused)" in said and "mlflow server --port PORT" in said
    said = _refused(["log_mlflow=true", "mlflow_experiment="], tmp_path / "b", capsys)
    assert "--set mlflow_experiment=: " in said and "1 to 500 characters" in said
    said = _refused(["log_mlflow=true", "mlflow_tracking_uri=htp://localhost:5000"], tmp_path / "c", capsys)
    assert "opens no store at a URI of this kind" in said and "http(s)://HOST:PORT" in said
    monkeypatch.setitem(sys.modules, "sqlalchemy", None)  # (the full package's SQLAlchemy missing)
    said = _refused(
        ["log_mlflow=true", f"mlflow_tracking_uri=sqlite:///{tmp_path}/m.db"], tmp_path / "d", capsys
    )
    assert "a database store needs the full mlflow package (pip install mlflow" in said
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # (named as the environment's)
    said = _refused(["log_mlflow=true"], tmp_path / "e", capsys)
    assert f"MLFLOW_TRACKING_URI={uri}: no MLflow server answers there" in said


def test_a_server_that_never_answers_is_refused_after_the_probe(silent_port, monkeypatch):
    pytest.importorskip("mlflow", reason="the MLflow logger's tests need pip install 'sheaf-fmtl[mlflow]'")
    monkeypatch.setattr(reach, "PROBE_SECONDS", 0.5)
    uri = f"http://127.0.0.1:{silent_port}"
    start = time.monotonic()
    with pytest.raises(ConfigError, match=rf"^mlflow_tracking_uri='{uri}': .*\(no answer within 0.5 s\)"):
        sheaf_fmtl.run(clients=3, rounds=2, log_mlflow=True, mlflow_tracking_uri=uri)
    assert time.monotonic() - start < 0.5 * 2 + 3  # (connect + answer, and the run's set-up)


def test_wandb_online_refuses_a_server_that_does_not_answer(tmp_path, capsys, closed_port, monkeypatch):
    pytest.importorskip("wandb", reason="the W&B logger's tests need pip install 'sheaf-fmtl[wandb]'")
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed_port}")
    monkeypatch.setenv("WANDB_API_KEY", "a" * 40)
    said = _refused(["log_wandb=true", "wandb_mode=online"], tmp_path / "w", capsys)
    assert said.startswith("sheaf-fmtl: error: --set wandb_mode=online: W&B's server http://127.0.0.1:")
    assert "(connection refused); log offline (the default" in said and "WANDB_BASE_URL" in said


def test_a_server_failing_during_the_run_ends_it_in_one_line(tmp_path, capsys, unavailable):
    pytest.importorskip("mlflow", reason="the MLflow logger's tests need pip install 'sheaf-fmtl[mlflow]'")
    start = time.monotonic()
    code = main(["run", "--out", str(tmp_path / "r"), "--quiet", "--set", *SMALL, "log_mlflow=true",
                 f"mlflow_tracking_uri={unavailable}"])  # fmt: skip
    took = time.monotonic() - start
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and took < BOUND, (lines, took)
    assert lines[0] == (
        f"sheaf-fmtl: error: MLflowLogger: logging round 0 to {unavailable} failed (too many 503 error "
        "responses); the run stopped there, its folder keeping what it wrote (--resume continues it)"
    )
    assert main(["run", "--resume", str(tmp_path / "r"), "--quiet"]) == 0  # (as the line says)


def test_wandb_without_a_login_ends_the_run_in_one_line(tmp_path, monkeypatch, unavailable):
    pytest.importorskip("wandb", reason="the W&B logger's tests need pip install 'sheaf-fmtl[wandb]'")
    monkeypatch.setenv("WANDB_BASE_URL", unavailable)
    start = time.monotonic()
    with pytest.raises(TrackerError, match=r"^WandbLogger: W&B could not start its online run \(No API key"):
        sheaf_fmtl.run(out=tmp_path / "r", clients=3, rounds=2, log_wandb=True, wandb_mode="online")
    assert time.monotonic() - start < BOUND


def test_wandb_gives_up_a_start_the_server_does_not_answer(tmp_path, monkeypatch, unavailable):
    pytest.importorskip("wandb", reason="the W&B logger's tests need pip install 'sheaf-fmtl[wandb]'")
    monkeypatch.setenv("WANDB_BASE_URL", unavailable)
    monkeypatch.setenv("WANDB_API_KEY", "a" * 40)
    monkeypatch.setattr(wandb_logger, "INIT_SECONDS", 2.0)
    start = time.monotonic()
    with pytest.raises(
        TrackerError, match=r"^WandbLogger: W&B could not start its online run \(.*the run stopped"
    ):
        sheaf_fmtl.run(out=tmp_path / "r", clients=3, rounds=2, log_wandb=True, wandb_mode="online")
    assert time.monotonic() - start < 2.0 + BOUND


def test_the_bounds_leave_the_users_settings_and_nothing_behind(monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "300")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    with environment({"MLFLOW_HTTP_REQUEST_TIMEOUT": "10", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2"}):
        assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "300"  # (the user's)
        assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "2"
    assert (
        os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "300"
        and "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ
    )
