"""The bench's problems: :class:`Setting` (shape of the generated data, graph, model, step sizes,
how many rounds to time) and the named settings ``sheaf-fmtl bench --settings`` accepts."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..config import RunConfig, validate


@dataclass(frozen=True)
class Setting:
    """One benchmark problem: generated data of the given shape, an Erdos-Renyi graph, one model."""

    name: str
    clients: int
    graph_p: float
    model: str
    feature_shape: tuple[int, ...]
    classes: int
    samples: int  # per client, before the 75/25 split (half the clients keep 20% of their training data)
    gamma: float
    lam: float
    alpha: float
    eta: float
    batch_size: int
    rounds: int  # timed rounds (after warm-up)
    warmup: int = 1
    ref_max_bytes: int = 1 << 30  # the reference copies at most this many map bytes (else: a subset of edges)
    ref_rounds: int = 2
    seed: int = 0
    map_dtype: str = "float32"
    # Draw the maps on the device (config ``map_draw=device``) instead of the library's per-map CPU
    # draws: same distribution; the CPU draws of 35 GiB of maps take minutes, which a GPU benchmark
    # should not spend. Recorded in bench.json with the setting.
    map_init_on_device: bool = False

    def config(self, device: str = "cpu") -> RunConfig:
        """The Sheaf-FMTL run config of this setting on ``device`` (validated)."""
        return validate(
            RunConfig(
                algorithm="sheaf-fmtl",
                maps="learned",  # the bench times Algorithm 1's round (and checks it against the reference)
                local_epochs=0,
                dataset=f"bench-{self.name}",
                model=self.model,
                clients=self.clients,
                graph="erdos-renyi",
                graph_p=self.graph_p,
                batch_size=self.batch_size,
                lam=self.lam,
                alpha=self.alpha,
                eta=self.eta,
                gamma=self.gamma,
                l2=1e-4,
                seed=self.seed,
                device=device,
                map_dtype=self.map_dtype,
                map_draw="device" if self.map_init_on_device else "host",
            )
        )


SMALL = Setting(
    "small",
    20,
    0.2,
    "logistic",
    (30,),
    10,
    200,
    0.3,
    0.05,
    0.05,
    0.01,
    32,
    rounds=20,
    warmup=3,
    ref_rounds=20,
)
PAPER = Setting("paper", 40, 0.15, "cnn", (1, 28, 28), 10, 1500, 0.01, 0.001, 0.01, 0.001, 32, rounds=3)
QUICK_PAPER = dataclasses.replace(
    PAPER,
    name="paper-quick",
    clients=12,
    graph_p=0.3,
    samples=200,
    gamma=0.002,
    rounds=3,
    ref_max_bytes=64 << 20,
)
# The paper's largest setting (R-MNIST, gamma = 0.03, 24 GB in the paper): bfloat16 maps (~17 GiB).
LARGEST = dataclasses.replace(
    PAPER,
    name="paper-g0.03-bf16",
    gamma=0.03,
    map_dtype="bfloat16",
    rounds=2,
    ref_max_bytes=256 << 20,
    ref_rounds=1,
)
# The paper's largest setting in float32 (35 GiB of maps: a GPU with enough memory, e.g. an H200).
PAPER_G03 = dataclasses.replace(
    PAPER, name="paper-g0.03", gamma=0.03, rounds=3, ref_max_bytes=256 << 20, ref_rounds=1
)
COHORT_CLIENTS = 40
SMOKE = [
    dataclasses.replace(
        SMALL, name="small-smoke", clients=8, graph_p=0.4, samples=60, rounds=2, warmup=1, ref_rounds=1
    ),
    dataclasses.replace(
        PAPER,
        name="cnn-smoke",
        clients=4,
        graph_p=1.0,
        samples=40,
        gamma=0.001,
        rounds=2,
        ref_rounds=1,
        ref_max_bytes=1 << 20,
    ),
]


def settings(quick: bool) -> list[Setting]:
    """The default settings: the small one and the paper-scale one (shrunk when ``quick``)."""
    return [SMALL, QUICK_PAPER if quick else PAPER]


SETTINGS = {s.name: s for s in (SMALL, PAPER, QUICK_PAPER, PAPER_G03, LARGEST, *SMOKE)}


def setting_named(name: str) -> Setting:
    """The setting called ``name``; a ValueError naming the known ones otherwise."""
    if name not in SETTINGS:
        raise ValueError(f"unknown bench setting {name!r}; known: {', '.join(SETTINGS)}")
    return SETTINGS[name]


def for_device(s: Setting, device: str) -> Setting:
    """On a GPU a paper-scale round takes milliseconds: time more rounds and give the loop
    reference a warm-up round (``ref_rounds > 2``), whose first calls set up cuBLAS and the allocator."""
    if not device.startswith("cuda"):
        return s
    return dataclasses.replace(
        s, rounds=max(s.rounds, 10), warmup=max(s.warmup, 2), ref_rounds=max(s.ref_rounds, 3)
    )
