"""``sheaf-fmtl data list | describe | fetch``; fetch runs against a local http.server thread."""

from __future__ import annotations

import functools
import hashlib
import http.server
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from sheaf_fmtl.cli.data import run, summarize
from sheaf_fmtl.data import fetch as fetch_mod
from sheaf_fmtl.data.fetch import SOURCES, Source, _unpack
from sheaf_fmtl.data.registry import DataRequest, load

from ..conftest import NO_DATA, shared_data_dir

pytestmark = pytest.mark.usefixtures("only_given_folders")

_found = shared_data_dir()  # read before only_given_folders clears $SHEAF_FMTL_DATA
SHARED = Path(_found) if _found else None


def shared_file(name: str) -> Path:
    """``name`` in the real datasets' folder, or the test is skipped (saying why)."""
    if SHARED is None:
        pytest.skip(NO_DATA)
    if not (SHARED / name).exists():
        pytest.skip(f"{SHARED / name} absent (the real file is needed)")
    return SHARED / name


@pytest.fixture
def server(tmp_path):
    """Serve ``tmp_path / 'www'`` on 127.0.0.1; yields (folder, base URL)."""
    www = tmp_path / "www"
    www.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
    handler.log_message = lambda *a, **k: None  # type: ignore[assignment]
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield www, f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_fetch_verifies_sha256_then_moves_into_place(server, tmp_path, capsys):
    school = shared_file("school.mat")  # the real file: its SHA-256 is in the table
    www, base = server
    shutil.copy(school, www / "school.mat")
    dest = tmp_path / "dest"
    assert run(["fetch", "school", "--dest", str(dest), "--url", f"{base}/school.mat"]) == 0
    assert (dest / "school.mat").read_bytes() == school.read_bytes()
    assert "verified" in capsys.readouterr().out
    assert sorted(p.name for p in dest.iterdir()) == ["school.mat"]
    assert load("school", DataRequest(data_dir=dest)).num_clients == 139


def test_fetch_refuses_wrong_checksum_and_leaves_nothing(server, tmp_path, capsys):
    www, base = server
    (www / "school.mat").write_bytes(b"not the MALSAR file" * 100)
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "school.mat").write_bytes(b"old")  # an existing file is not replaced by a bad download
    assert run(["fetch", "school", "--dest", str(dest), "--url", f"{base}/school.mat"]) == 2
    err = capsys.readouterr().err
    assert "SHA-256" in err and "school.mat" in err
    assert sorted(p.name for p in dest.iterdir()) == ["school.mat"]
    assert (dest / "school.mat").read_bytes() == b"old"


def test_fetch_without_known_checksum_warns_and_honours_given_sha(server, tmp_path, capsys):
    www, base = server
    payload = b"pretend vehicle.mat"
    (www / "v.mat").write_bytes(payload)
    dest = tmp_path / "dest"
    assert SOURCES["vehicle"][0].sha256 is None
    assert run(["fetch", "vehicle", "--dest", str(dest), "--url", f"{base}/v.mat"]) == 0
    out = capsys.readouterr().out
    assert "no official SHA-256" in out and hashlib.sha256(payload).hexdigest() in out
    assert (dest / "vehicle.mat").read_bytes() == payload
    wrong = "0" * 64
    assert (
        run(["fetch", "vehicle", "--dest", str(tmp_path / "d2"), "--url", f"{base}/v.mat", "--sha256", wrong])
        == 2
    )
    assert not (tmp_path / "d2" / "vehicle.mat").exists()


def test_fetch_stores_in_the_user_data_folder_where_runs_find_it(server, tmp_path, monkeypatch, capsys):
    www, base = server
    schools = 139  # the reader checks the published number of schools
    arrays = {f"x_{i}": np.ones((4, 28)) * i for i in range(schools)}
    np.savez(
        www / "s.npz",
        num_clients=np.int64(schools),
        **arrays,
        **{f"y_{i}": np.arange(4.0) for i in range(schools)},
    )
    digest = hashlib.sha256((www / "s.npz").read_bytes()).hexdigest()
    monkeypatch.setitem(SOURCES, "school", [Source("school.npz", f"{base}/s.npz", digest)])
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert run(["fetch", "school"]) == 0
    assert (tmp_path / "xdg" / "sheaf-fmtl" / "school.npz").exists()
    assert load("school", DataRequest()).num_clients == schools  # no --data-dir, no $SHEAF_FMTL_DATA
    assert run(["list"]) == 0
    assert str(tmp_path / "xdg" / "sheaf-fmtl" / "school.npz") in capsys.readouterr().out


def test_fetch_unreachable_url_and_gleam_without_url(tmp_path, capsys):
    assert run(["fetch", "school", "--dest", str(tmp_path), "--url", "http://127.0.0.1:9/school.mat"]) == 2
    assert "download" in capsys.readouterr().err
    assert run(["fetch", "gleam", "--dest", str(tmp_path)]) == 2
    assert "--url" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_fetch_unpacks_verified_tar_archive(server, tmp_path, monkeypatch):
    import tarfile

    www, base = server
    src = tmp_path / "src" / "cifar-10-batches-py"
    src.mkdir(parents=True)
    (src / "readme.html").write_text("hi")
    with tarfile.open(www / "c.tar.gz", "w:gz") as tf:
        tf.add(src, arcname="cifar-10-batches-py")
    digest = hashlib.sha256((www / "c.tar.gz").read_bytes()).hexdigest()
    entry = SOURCES["hcifar10"][0]
    monkeypatch.setitem(SOURCES, "hcifar10", [Source(entry.filename, entry.url, digest, unpack=True)])
    dest = tmp_path / "dest"
    assert run(["fetch", "hcifar10", "--dest", str(dest), "--url", f"{base}/c.tar.gz"]) == 0
    assert (dest / "cifar-10-batches-py" / "readme.html").read_text() == "hi"


def test_unpack_refuses_paths_outside_destination(tmp_path):
    import zipfile

    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../escape.txt", "x")
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(fetch_mod.DatasetError, match="outside"):
        _unpack(archive, dest)
    assert not (tmp_path / "escape.txt").exists()


def test_list_reports_found_and_missing(tmp_path, capsys):
    np.savez(tmp_path / "school.npz", num_clients=np.int64(1), x_0=np.zeros((2, 28)), y_0=np.zeros(2))
    assert run(["list", "--data-dir", str(tmp_path)]) == 0
    lines = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines()[1:]}
    assert "found" in lines["school"] and str(tmp_path / "school.npz") in lines["school"]
    for name in ("gleam", "har", "hcifar10", "rmnist", "vehicle"):
        assert "missing" in lines[name]


def test_describe_label_skew_of_pure_clients(tmp_path, capsys):
    # every client holds one class only: each client's label distribution is a point mass, so the mean
    # TV distance to the global one is 1 - mean_k g[c_k], i.e. 0.5 for two clients of classes 0 and 1,
    # whatever the protocol does to the client sizes.
    path = tmp_path / "pure.npz"
    np.savez(
        path,
        num_clients=np.int64(2),
        x_0=np.random.default_rng(0).normal(size=(20, 3)),
        y_0=np.zeros(20, np.int64),
        x_1=np.random.default_rng(1).normal(size=(20, 3)),
        y_1=np.ones(20, np.int64),
    )
    with pytest.warns(UserWarning, match=r"client\(s\) \[0, 1\] are all one class"):
        s = summarize(load(f"file:{path}", DataRequest(seed=0)))
    assert s["mean_tv_distance"] == pytest.approx(0.5)
    assert s["classes_per_client_max"] == 1
    with pytest.warns(UserWarning, match="one class"):
        assert run(["describe", f"file:{path}", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "0.500" in out and "min 3, max 15" in out  # 20 -> 15 train; the reduced client keeps 20% of 15


def test_describe_regression_and_bad_option(tmp_path, capsys):
    folder = shared_file("school.mat").parent
    assert run(["describe", "school", "--data-dir", str(folder), "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert "139 clients" in out and "min 22, max 251, total 15362" in out
    assert run(["describe", "school", "--data-dir", str(folder), "-o", "nope=1"]) == 2
    assert "unknown dataset option data.nope" in capsys.readouterr().err


def test_fetch_unpacks_uci_style_nested_zip(server, tmp_path, monkeypatch):
    import io
    import zipfile

    www, base = server
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as zf:
        zf.writestr("UCI HAR Dataset/train/y_train.txt", "1\n2\n")
    with zipfile.ZipFile(www / "har.zip", "w") as zf:
        zf.writestr("UCI HAR Dataset.zip", inner.getvalue())
        zf.writestr("UCI HAR Dataset.names", "about")
    dest = tmp_path / "dest"
    assert run(["fetch", "har", "--dest", str(dest), "--url", f"{base}/har.zip"]) == 0
    assert (dest / "UCI HAR Dataset" / "train" / "y_train.txt").read_text() == "1\n2\n"
    assert not (dest / "UCI HAR Dataset.zip").exists()


@pytest.fixture
def lying_server():
    """A loopback server whose ``/N/M`` announces ``N`` bytes (Content-Length) and sends ``M``."""

    class Lying(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            announced, sent = (int(p) for p in self.path.strip("/").split("/")[:2])
            self.send_response(200)
            self.send_header("Content-Length", str(announced))
            self.end_headers()
            self.wfile.write(b"x" * sent)
            self.wfile.flush()
            self.close_connection = True

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Lying)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.mark.parametrize(
    "announced, sent, how", [(1_000_000, 5_000, "cut short"), (5_000, 6_000, "longer than announced")]
)
def test_fetch_refuses_a_body_of_another_length_than_announced(
    lying_server, tmp_path, capsys, announced, sent, how
):
    """No checksum known (vehicle): the length alone catches the short (or long) body; nothing is
    installed, and the destination folder the fetch made is removed again."""
    dest = tmp_path / "made" / "here"
    url = f"{lying_server}/{announced}/{sent}"
    assert run(["fetch", "vehicle", "--dest", str(dest), "--url", url]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"announced {announced} bytes" in err and f"sent {sent}" in err, err
    assert how in err and not (tmp_path / "made").exists()


def test_fetch_of_the_announced_length_is_installed(lying_server, tmp_path):
    """The oracle: the same server telling the truth, hashed independently."""
    dest = tmp_path / "d"
    assert run(["fetch", "vehicle", "--dest", str(dest), "--url", f"{lying_server}/5000/5000"]) == 0
    assert (dest / "vehicle.mat").read_bytes() == b"x" * 5000
    wrong = hashlib.sha256(b"y" * 5000).hexdigest()
    url = f"{lying_server}/5000/5000"
    assert run(["fetch", "vehicle", "--dest", str(tmp_path / "e"), "--url", url, "--sha256", wrong]) == 2
    assert not (tmp_path / "e").exists()


def test_fetch_without_network_leaves_no_folder_it_made(tmp_path, capsys):
    dest = tmp_path / "new" / "data"
    assert run(["fetch", "school", "--dest", str(dest), "--url", "http://127.0.0.1:9/school.mat"]) == 2
    assert "download" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_every_file_dataset_has_a_card() -> None:
    from sheaf_fmtl.cli.data import DATASET_FILES
    from sheaf_fmtl.data.cards import CARDS

    assert set(CARDS) == set(DATASET_FILES)


@pytest.mark.parametrize("name", ["rmnist", "gleam"])
def test_describe_without_the_files_says_what_it_is_and_where_to_put_it(tmp_path, capsys, name):
    empty = tmp_path / "data"
    empty.mkdir()
    assert run(["describe", name, "--data-dir", str(empty)]) == 0
    out = capsys.readouterr().out
    heads = [line.split(":")[0] for line in out.splitlines()]
    assert heads == [name, "source", "licence", "size", "files", "put them in", "get it"], out
    assert f"put them in: {empty}\n" in out and "(not found here)" in out
    assert f"sheaf-fmtl data fetch {name}" in out
    assert ("--url URL" in out) == (SOURCES[name][0].url is None)


def test_describe_of_a_damaged_file_is_still_the_readers_error(tmp_path, capsys):
    (tmp_path / "school.mat").write_bytes(b"not a mat file")
    assert run(["describe", "school", "--data-dir", str(tmp_path)]) == 2
    assert "school.mat" in capsys.readouterr().err
