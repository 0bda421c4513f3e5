"""The authenticated silo transport (``transport = tls``): frames against a hand-built header, the
certificates against cryptography's own verification, the links' refusals, and every rejection of
a frame counted and never applied. The runs over three silos are in ``test_silonet_runs.py``."""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

grpc = pytest.importorskip("grpc", reason="the silo transport needs grpcio (pip install 'sheaf-fmtl[silos]')")
pytest.importorskip("cryptography", reason="certs init needs cryptography (pip install 'sheaf-fmtl[silos]')")

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.verification import PolicyBuilder, Store  # noqa: E402

from sheaf_fmtl.config import ConfigError  # noqa: E402
from sheaf_fmtl.messages import EdgeTensor  # noqa: E402
from sheaf_fmtl.runtime.engine.faults import Faults  # noqa: E402
from sheaf_fmtl.runtime.engine.shard import Shard  # noqa: E402
from sheaf_fmtl.runtime.engine.silo_transport import SiloTransport  # noqa: E402
from sheaf_fmtl.runtime.run.launching.spawn import free_port  # noqa: E402
from sheaf_fmtl.runtime.silonet import wire  # noqa: E402
from sheaf_fmtl.runtime.silonet.attacks import dial, frame_for, run_attacks  # noqa: E402
from sheaf_fmtl.runtime.silonet.certs import init_certs, load_identity  # noqa: E402
from sheaf_fmtl.runtime.silonet.group import SiloGroup, spanning_tree  # noqa: E402
from sheaf_fmtl.runtime.silonet.links import Mailbox, Refused, SiloLinks  # noqa: E402
from sheaf_fmtl.sheaf.graph import ClientGraph  # noqa: E402
from sheaf_fmtl.sheaf.layout import build_layout  # noqa: E402


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs") / "federation"
    init_certs(out, 3)
    return out


# -- frames --------------------------------------------------------------------------------------
def test_a_frame_is_the_hand_built_header_the_raw_bytes_and_their_sha256() -> None:
    data = torch.tensor([[1.5, -2.0, 3.25], [0.0, 4.0, -8.5]], dtype=torch.float64)
    header = wire.Header(wire.EDGE, torch.float64, (2, 3), 7, 42, 1, 2, 0xDEADBEEF)
    frame = wire.encode(header, data)
    payload = np.array([1.5, -2.0, 3.25, 0.0, 4.0, -8.5], dtype="<f8").tobytes()
    code = wire.DTYPES.index(torch.float64)
    head = b"SFW1" + struct.pack("<BBBBQQIIQ", wire.EDGE, code, 2, 0, 7, 42, 1, 2, 0xDEADBEEF)
    head += struct.pack("<QQ", 2, 3) + struct.pack("<Q", len(payload))
    assert frame == head + payload + hashlib.sha256(head + payload).digest()
    back = wire.decode(frame)
    assert back.header == header and torch.equal(back.data, data)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool])
def test_every_listed_dtype_travels_bit_for_bit(dtype: torch.dtype) -> None:
    data = (torch.arange(12) % 5 - 2).to(dtype).reshape(3, 4)
    back = wire.decode(wire.encode(wire.Header(wire.UP, dtype, (3, 4), 0, 1, 0, 1, 0), data)).data
    assert back.dtype == dtype and torch.equal(back, data)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda f: f[:-40] + bytes([f[-40] ^ 1]) + f[-39:], "digest"),
        (lambda f: b"XXXX" + f[4:], "magic"),
        (lambda f: f[:-1], "length"),
        (lambda f: f[:5] + bytes([200]) + f[6:], "dtype"),
    ],
)
def test_an_altered_frame_does_not_decode(change, words: str) -> None:  # noqa: ANN001
    frame = wire.encode(wire.Header(wire.EDGE, torch.float32, (4,), 0, 1, 0, 1, 0), torch.ones(4))
    with pytest.raises(wire.WireError, match=words):
        wire.decode(change(frame))


def test_named_tensors_pack_and_unpack_and_a_cut_table_is_refused() -> None:
    named = {"t/3": torch.randn(5), "m/1": torch.randn(2, 3).to(torch.bfloat16), "b/0/n": torch.tensor(7)}
    back = wire.unpack_tensors(wire.pack_tensors(named))
    assert list(back) == list(named) and all(torch.equal(back[k], v) for k, v in named.items())
    with pytest.raises(wire.WireError):
        wire.unpack_tensors(wire.pack_tensors(named)[:-3])


# -- certificates --------------------------------------------------------------------------------
def test_certs_init_writes_private_keys_and_certificates_the_authority_verifies(certs: Path) -> None:
    ca = x509.load_pem_x509_certificate((certs / "ca.pem").read_bytes())
    verifier = PolicyBuilder().store(Store([ca])).build_client_verifier()
    for rank in range(3):
        folder = certs / f"silo-{rank}"
        assert stat.S_IMODE(os.stat(folder / "key.pem").st_mode) == 0o600
        cert = x509.load_pem_x509_certificate((folder / "cert.pem").read_bytes())
        verified = verifier.verify(cert, [])  # cryptography's own path validation
        assert verified.subjects is not None
        assert [n.value for n in verified.subjects] == [f"silo-{rank}"]
        key = serialization.load_pem_private_key((folder / "key.pem").read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        assert key.public_key().public_numbers() == cert.public_key().public_numbers()  # type: ignore[union-attr]
    assert stat.S_IMODE(os.stat(certs / "ca.key").st_mode) == 0o600
    with pytest.raises(ValueError, match="already holds an authority"):
        init_certs(certs, 3)


def test_a_silo_refuses_a_readable_key_another_silos_certificate_and_another_authority(
    certs: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    init_certs(other, 2)
    mixed = tmp_path / "mixed" / "silo-1"
    mixed.mkdir(parents=True)
    for name in ("cert.pem", "key.pem"):
        (mixed / name).write_bytes((other / "silo-1" / name).read_bytes())
    (mixed / "ca.pem").write_bytes((certs / "ca.pem").read_bytes())
    os.chmod(mixed / "key.pem", 0o600)
    with pytest.raises(ConfigError, match="not issued by"):
        load_identity(tmp_path / "mixed", 1)
    os.chmod(mixed / "key.pem", 0o644)
    with pytest.raises(ConfigError, match="may be read by others"):
        load_identity(tmp_path / "mixed", 1)
    wrong = tmp_path / "wrong" / "silo-2"
    wrong.mkdir(parents=True)
    for name in ("ca.pem", "key.pem"):
        (wrong / name).write_bytes((certs / "silo-2" / name).read_bytes())
    os.chmod(wrong / "key.pem", 0o600)
    (wrong / "cert.pem").write_bytes((certs / "silo-1" / "cert.pem").read_bytes())
    with pytest.raises(ConfigError, match="'silo-1''s certificate, not 'silo-2''s"):
        load_identity(tmp_path / "wrong", 2)
    assert load_identity(certs, 2).rank == 2


# -- links ---------------------------------------------------------------------------------------
def test_the_links_refuse_another_authority_a_non_neighbour_and_an_altered_frame(certs: Path) -> None:
    lines = run_attacks(certs, target=0, neighbour=1, outsider=2, address=f"127.0.0.1:{free_port()}")
    assert len(lines) == 3 and all("refused" in line for line in lines)
    assert "UNAVAILABLE" in lines[0]  # the handshake itself
    assert "PERMISSION_DENIED" in lines[1] and "not a graph neighbour" in lines[1]
    assert "digest" in lines[2] and lines[2].endswith("not applied")


def test_a_neighbour_is_admitted(certs: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    server = SiloLinks(load_identity(certs, 0), address, timeout_s=10.0)
    server.attach({1: "127.0.0.1:9"})
    try:
        assert dial(load_identity(certs, 1), address, 0, frame_for(1, 0)) == "accepted"
        got = server.mailbox.take(1, 1, timeout_s=1.0)
        assert got is not None and not isinstance(got, Refused)
        assert torch.equal(got.data, torch.arange(8, dtype=torch.float32))
    finally:
        server.close()


def test_the_mailbox_refuses_a_forged_sender_another_receiver_a_repeat_and_a_past_step() -> None:
    box = Mailbox(0)
    assert "certificate silo 1" in (box.put(1, frame_for(2, 0)) or "")
    assert "not this silo" in (box.put(1, frame_for(1, 2)) or "")
    assert box.put(1, frame_for(1, 0, step=1)) is None
    assert "already" in (box.put(1, frame_for(1, 0, step=1)) or "")
    assert box.take(1, 1, timeout_s=0.0) is not None
    assert "over" in (box.put(1, frame_for(1, 0, step=1)) or "")
    assert box.refused_count() == 4


def test_the_spanning_tree_reaches_every_silo_breadth_first_and_refuses_a_split_graph() -> None:
    parent, children = spanning_tree([{1, 2}, {0, 3}, {0}, {1}])
    assert parent == [-1, 0, 0, 1] and children == [[1, 2], [3], [], []]
    with pytest.raises(ValueError, match="not connected"):
        spanning_tree([{1}, {0}, set()])


# -- the edge exchange: a silo against a hand-driven neighbour -------------------------------------
GRAPH = ClientGraph(4, np.array([[0, 1], [1, 2], [2, 3]]))
OWNER = np.array([0, 0, 1, 1])
DIM = 6


def _silo_zero(certs: Path, addresses: dict[int, str]) -> SiloTransport:
    links = SiloLinks(load_identity(certs, 0), addresses[0], timeout_s=10.0)
    group = SiloGroup(links, 0, 2, addresses)
    group.attach(OWNER, GRAPH.src, GRAPH.dst)
    return SiloTransport(Shard(0, 2, OWNER), GRAPH, group, Faults())


def _layout():  # noqa: ANN202 - silo 0's message layout (clients 0 and 1)
    return build_layout(GRAPH, [DIM] * 4, np.where(OWNER == 0, 0, -1), 1.0).messages


def _honest(step: int = 1, **change: object) -> bytes:
    """Silo 1's frame to silo 0 at ``step``: the message along edge 1 -> 2, maybe changed."""
    fields = dict(kind=wire.EDGE, dtype=torch.float64, shape=(DIM,), round=0, step=step, sender=1, receiver=0)
    fields["edge"] = wire.edge_tag("x", np.array([1]))
    fields.update(change)
    data = torch.full(fields["shape"], 5.0, dtype=fields["dtype"])  # type: ignore[arg-type]
    return wire.encode(wire.Header(**fields), data)  # type: ignore[arg-type]


CHANGES = {
    "round": lambda: _honest(round=5),
    "edge": lambda: _honest(edge=wire.edge_tag("x", np.array([2]))),
    "shape": lambda: _honest(shape=(DIM + 1,)),
    "dtype": lambda: _honest(dtype=torch.float32),
    "tampered": lambda: (lambda f: f[:-40] + bytes([f[-40] ^ 1]) + f[-39:])(_honest()),
}


def _exchange_against(certs: Path, frames: list[bytes]) -> tuple[dict[str, EdgeTensor], SiloTransport]:
    addresses = {0: f"127.0.0.1:{free_port()}", 1: f"127.0.0.1:{free_port()}"}
    neighbour = SiloLinks(load_identity(certs, 1), addresses[1], timeout_s=10.0)
    neighbour.attach({0: addresses[0]})
    silo = _silo_zero(certs, addresses)
    layout = _layout()
    data = torch.arange(layout.total, dtype=torch.float64) + 1.0

    def drive() -> None:
        for frame in frames:
            try:
                neighbour.settle(0, neighbour.send(0, frame))
            except RuntimeError:  # refused on arrival: the test counts it on silo 0's side
                pass
        neighbour.take(0, 1)  # what silo 0 sent

    other = threading.Thread(target=drive)
    other.start()
    try:
        out = silo.exchange({"x": EdgeTensor(data, layout)})
    finally:
        other.join(timeout=20)
        silo.group.links.close()
        neighbour.close()
    return out, silo


def _from_silo_one() -> np.ndarray:
    layout = _layout()
    return np.flatnonzero(layout.rev < 0)


@pytest.mark.parametrize("reason", list(CHANGES))
def test_a_wrong_frame_is_counted_and_never_applied(certs: Path, reason: str) -> None:
    out, silo = _exchange_against(certs, [CHANGES[reason]()])
    item = out["x"]
    remote = _from_silo_one()
    assert (
        item.heard is not None
        and not bool(item.heard[remote].any())
        and bool(item.heard.sum() == len(item.heard) - len(remote))
    )
    start = int(item.layout.offsets[remote[0]])
    assert torch.equal(item.data[start : start + DIM], torch.zeros(DIM, dtype=torch.float64))
    assert silo.faults.counts()["rejected_messages"] == len(remote)


def test_a_forged_sender_is_counted_and_the_honest_frame_applied(certs: Path) -> None:
    out, silo = _exchange_against(certs, [_honest(sender=2), _honest()])
    item = out["x"]
    remote = _from_silo_one()
    start = int(item.layout.offsets[remote[0]])
    assert item.heard is None or bool(item.heard.all())
    assert torch.equal(item.data[start : start + DIM], torch.full((DIM,), 5.0, dtype=torch.float64))
    assert silo.faults.counts()["rejected_messages"] == 1


# -- the keys ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("keys", "words"),
    [
        ({"transport": "tls", "processes": 3}, "'tls_certs' must name"),
        ({"transport": "tls", "tls_certs": "c"}, "processes = 1 runs one"),
        ({"transport": "tls", "tls_certs": "c", "processes": 3, "silo": 3}, "0 <= silo < processes"),
        ({"transport": "tls", "tls_certs": "c", "processes": 3, "silo": 1}, "needs their addresses"),
        ({"transport": "grpc"}, "transport"),
    ],
)
def test_the_silo_keys_are_refused_in_one_line_naming_the_key(keys: dict[str, object], words: str) -> None:
    from sheaf_fmtl.config import RunConfig

    with pytest.raises(ConfigError, match=words) as refused:
        RunConfig(**keys)  # type: ignore[arg-type]
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("0: a:1\n1: b:2\n", None),
        ("0: a:1\n", "needs exactly 0 .. 1"),
        ("0: a:1\n1: b\n", "not host:port"),
        ("- a:1\n- b:2\n", "must map each silo"),
        ("0: [a\n", "not YAML"),
    ],
)
def test_the_peers_file_names_every_silo_with_a_port(tmp_path: Path, text: str, words: str | None) -> None:
    from sheaf_fmtl.runtime.silonet.session import read_peers

    (tmp_path / "peers.yaml").write_text(text)
    if words is None:
        assert read_peers(tmp_path / "peers.yaml", 2) == {0: "a:1", 1: "b:2"}
        return
    with pytest.raises(ConfigError, match=words):
        read_peers(tmp_path / "peers.yaml", 2)


# -- along the tree ------------------------------------------------------------------------------
def test_three_silos_sum_from_the_last_rank_down_gather_and_share_their_numbers(certs: Path) -> None:
    """A path 0 - 1 - 2 (silo 2 reaches silo 0 through silo 1): the sum is ``t0 + (t1 + t2)``
    (chosen so that ``(t0 + t1) + t2`` differs), the maximum, the gather and the all-gather."""
    parts = [torch.tensor([1.0], dtype=torch.float32), torch.tensor([1e8]), torch.tensor([-1e8])]
    assert not torch.equal((parts[0] + parts[1]) + parts[2], parts[0] + (parts[1] + parts[2]))
    graph = ClientGraph(3, np.array([[0, 1], [1, 2]]))
    owner = np.arange(3)
    addresses = {r: f"127.0.0.1:{free_port()}" for r in range(3)}
    groups = [
        SiloGroup(SiloLinks(load_identity(certs, r), addresses[r], 10.0), r, 3, addresses) for r in range(3)
    ]
    results: dict[int, tuple[object, ...]] = {}

    def silo(r: int) -> None:
        g = groups[r]
        g.attach(owner, graph.src, graph.dst)
        total = g.reduce(parts[r], "sum")
        top = g.reduce(torch.tensor([r, -r]), "max")
        gathered = g.gather({f"t/{r}": torch.full((2,), float(r))})
        shared = g.all_gather_json({"rank": r, "name": f"silo {r}"})
        results[r] = (total, top, gathered, shared)

    threads = [threading.Thread(target=silo, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    for g in groups:
        g.links.close()
    assert sorted(results) == [0, 1, 2]
    assert groups[2].parent == 1 and groups[0].children == [1] and groups[0].neighbours == {1}
    for r, (total, top, gathered, shared) in results.items():
        assert torch.equal(total, parts[0] + (parts[1] + parts[2]))  # type: ignore[arg-type]
        assert torch.equal(top, torch.tensor([2, 0]))  # type: ignore[arg-type]
        assert shared == [{"rank": k, "name": f"silo {k}"} for k in range(3)]
        assert (gathered is None) == (r != 0)
    gathered = results[0][2]
    assert isinstance(gathered, dict) and sorted(gathered) == ["t/0", "t/1", "t/2"]
    assert all(torch.equal(gathered[f"t/{k}"], torch.full((2,), float(k))) for k in range(3))
