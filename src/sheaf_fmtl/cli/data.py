"""``sheaf-fmtl data list | describe | fetch`` (hooked into the main CLI through :func:`add_parser`);
beside the other commands, above the config it reads ``--set`` with.

``describe`` prints what the paper's Table "Data partitioning" reports (min/max training samples
n_k per client after the protocol) plus class balance and a non-IID summary: the mean total-variation
distance between each client's label distribution and the global one (classification) or the spread
of per-client target means (regression); the partition of a pooled dataset when one is set
(``--set partition=dirichlet``), and with ``--plot FILE`` the clients' label distribution as a figure.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..commandline import PROG, Parser, UsageError, add_config_options, config_keys, error_line
from ..config import ConfigError, RunConfig, load_config
from ..data.base import DatasetError, FederatedDataset, PartitionSpec
from ..data.cards import CARDS
from ..data.fetch import SOURCES, fetch
from ..data.files import ENV_VAR, search_dirs, try_find, user_data_dir
from ..data.protocol import apply_protocol
from ..data.registry import DataRequest, dataset_files, dataset_names, load_raw

#: Files that make each file-based dataset available (any one of each list suffices), as the readers
#: declare them (``register(name, files=...)``).
DATASET_FILES: dict[str, tuple[str, ...]] = dataset_files()


def add_parser(subparsers: Any) -> None:
    """Add the ``data`` command group to an ``argparse`` sub-parser collection."""
    p = subparsers.add_parser("data", help="list, describe and fetch datasets")
    sub = p.add_subparsers(dest="data_command", required=True)
    ls = sub.add_parser("list", help="which datasets are available, and where")
    add_config_options(
        ls, config_file=False, sets=False, flags=("data_dir",), out=None, quiet=False, overwrite=False
    )
    d = sub.add_parser("describe", help="per-client counts, class balance, non-IID summary")
    d.add_argument("name", help="dataset name or file:PATH")
    add_config_options(
        d, config_file=False, flags=("data_dir", "clients", "seed"), out=None, quiet=False, overwrite=False
    )  # dataset options: --set data.KEY=VALUE
    d.add_argument(
        "--option", "-o", action="append", default=[], metavar="KEY=VALUE", help=argparse.SUPPRESS
    )  # older spelling of --set data.KEY=VALUE
    d.add_argument(
        "--per-client", action="store_true", help=f"list every client's count (default up to {LIST_UP_TO})"
    )
    d.add_argument(
        "--plot",
        type=Path,
        default=None,
        metavar="FILE",
        help="save the clients' label distribution (classes stacked per client) as FILE (.png, .pdf, .svg)",
    )
    f = sub.add_parser("fetch", help="download a dataset and verify its SHA-256")
    f.add_argument("name", choices=sorted(SOURCES))
    f.add_argument(
        "--dest",
        type=Path,
        default=None,
        help="folder to store it in (default: the user data folder, searched by runs)",
    )
    f.add_argument("--url", default=None, help="download from here instead of the official address")
    f.add_argument("--sha256", default=None, help="expected SHA-256 where the table has none")
    p.set_defaults(func=main_data)


def _describe_config(args: argparse.Namespace) -> RunConfig:
    """The config ``describe`` reads its dataset with: ``--set`` (``data.KEY=VALUE``, ``seed=``,
    ...), then the flags; validated like ``sheaf-fmtl run``'s."""
    sets = [*args.set, *(f"data.{pair}" for pair in args.option)]
    return load_config(None, sets, {"dataset": args.name, **config_keys(args)})


def cmd_list(data_dir: Path | None) -> int:
    print("searched: " + ", ".join(str(d) for d in search_dirs(data_dir)))
    for name in dataset_names():
        if name not in DATASET_FILES:
            print(f"{name:18s} built-in (generated)")
            continue
        found = try_find(DATASET_FILES[name], data_dir)
        if found is None:
            print(f"{name:18s} missing  (get it: sheaf-fmtl data fetch {name})")
            continue
        subset = name == "vehicle" and found.suffix == ".npz"
        print(f"{name:18s} found    {found}" + (" (small subset; vehicle.mat preferred)" if subset else ""))
    return 0


def summarize(ds: FederatedDataset) -> dict[str, Any]:
    """Numbers printed by ``describe`` (also used by tests)."""
    n_train = np.array([len(c.y_train) for c in ds.clients])
    n_test = np.array([len(c.y_test) for c in ds.clients])
    out: dict[str, Any] = {
        "clients": ds.num_clients,
        "feature_shapes": sorted({ds.feature_shape(i) for i in range(ds.num_clients)}),
        "n_train_min": int(n_train.min()),
        "n_train_max": int(n_train.max()),
        "n_train_total": int(n_train.sum()),
        "n_test_total": int(n_test.sum()),
    }
    if ds.task == "classification":
        c = ds.num_classes
        counts = np.stack([np.bincount(cl.y_train, minlength=c)[:c] for cl in ds.clients]).astype(float)
        glob = counts.sum(0) / counts.sum()
        local = counts / np.maximum(counts.sum(1, keepdims=True), 1)
        out["class_fractions"] = glob.round(4).tolist()
        out["mean_tv_distance"] = float(0.5 * np.abs(local - glob).sum(1).mean())
        out["classes_per_client_min"] = int((counts > 0).sum(1).min())
        out["classes_per_client_max"] = int((counts > 0).sum(1).max())
    else:
        means = np.array([float(np.mean(cl.y_train)) for cl in ds.clients])
        out["target_mean"] = float(np.concatenate([cl.y_train for cl in ds.clients]).mean())
        out["client_mean_std"] = float(means.std())
        out["client_mean_range"] = [float(means.min()), float(means.max())]
    return out


def cmd_describe(args: argparse.Namespace) -> int:
    if args.plot is not None:
        check_plot_path(args.plot)
    req = DataRequest(
        clients=args.clients,
        seed=args.seed,
        data_dir=args.data_dir,
        data_search=args.data_search,
        options=args.options,
        partition=args.partition,
    )
    try:
        raw = load_raw(args.name, req)
    except DatasetError:
        if args.name not in CARDS or try_find(DATASET_FILES[args.name], args.data_dir, args.data_search):
            raise  # the files are there, but cannot be read: the reader's message
        return _card(args.name, args.data_dir, args.data_search)
    ds = apply_protocol(raw, args.seed)
    s = summarize(ds)
    sizes = [len(c.y) + (0 if c.y_test is None else len(c.y_test)) for c in raw.clients]
    print(f"{ds.name}: {ds.task}, {s['clients']} clients, feature shape(s) {s['feature_shapes']}")
    if args.partition.method != "none":
        print(f"partition: {args.partition.describe()} of the pooled samples over {s['clients']} clients")
    print(f"samples per client before the protocol: min {min(sizes)}, max {max(sizes)}, total {sum(sizes)}")
    print(
        f"training samples per client n_k: min {s['n_train_min']}, max {s['n_train_max']} "
        f"(total train {s['n_train_total']}, test {s['n_test_total']}; seed {args.seed})"
    )
    if ds.task == "classification":
        print(f"class balance (train): {s['class_fractions']}")
        print(f"classes per client: {s['classes_per_client_min']}..{s['classes_per_client_max']}")
        print(
            f"non-IID: mean total-variation distance of client label distributions to the global one "
            f"= {s['mean_tv_distance']:.3f}"
        )
    else:
        lo, hi = s["client_mean_range"]
        print(
            f"targets: global mean {s['target_mean']:.3f}; per-client means std "
            f"{s['client_mean_std']:.3f}, range {lo:.3f}..{hi:.3f}"
        )
    counts = np.array([len(c.y_train) for c in ds.clients])
    if args.per_client or len(counts) <= LIST_UP_TO:
        print("per-client n_train: " + " ".join(str(n) for n in counts.tolist()))
    else:
        print("\n".join(count_summary(counts)))
    if args.plot is not None:
        _plot(ds, args.plot, args.partition)
    return 0


def check_plot_path(path: Path) -> str:
    """The format ``--plot PATH`` names (``png``, ``pdf``, ``svg``), checked before any data are read."""
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in ("png", "pdf", "svg"):
        raise DatasetError(f"--plot {path}: name a .png, .pdf or .svg file (e.g. --plot labels.png)")
    return fmt


def _plot(ds: FederatedDataset, path: Path, spec: PartitionSpec) -> None:
    """Save the label distribution figure of ``ds`` (:mod:`..plots.label_mix`) as ``path``."""
    fmt = check_plot_path(path)
    if ds.task != "classification":
        raise DatasetError(f"--plot: {ds.name} is a regression dataset; the figure shows class labels")
    from ..plots.label_mix import label_counts, label_mix_figure
    from ..plots.style import save_figure

    counts = label_counts([c.y_train for c in ds.clients], ds.num_classes)
    how = "" if spec.method == "none" else f"\npartition {spec.describe()}"
    fig = label_mix_figure(counts, f"{ds.name}: training labels per client{how}")
    written = save_figure(fig, path.with_suffix(""), (fmt,))
    print(f"label distribution: {written[0]}")


#: Clients up to which ``describe`` lists every client's count (above: quantiles and a histogram).
LIST_UP_TO = 40


def count_summary(counts: np.ndarray, bins: int = 10, width: int = 40) -> list[str]:
    """Lines summarising per-client counts: quantiles, then a histogram of ``bins`` bars."""
    q = np.quantile(counts, [0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0], method="nearest")  # clients' counts
    names = ("min", "10%", "25%", "median", "75%", "90%", "max")
    lines = ["per-client n_train: " + ", ".join(f"{n} {v:g}" for n, v in zip(names, q, strict=True))]
    hist, edges = np.histogram(counts, bins=bins)
    top = max(int(hist.max()), 1)
    for h, lo, hi in zip(hist.tolist(), edges[:-1], edges[1:], strict=True):
        lines.append(f"  {lo:8.0f} - {hi:<8.0f} {'#' * round(width * h / top):<{width}} {h}")
    lines.append(f"  ({len(counts)} clients; --per-client lists each)")
    return lines


def _card(name: str, data_dir: Path | None, search: bool) -> int:
    """What ``describe`` prints of a paper dataset whose files are missing: :data:`.data.cards.CARDS`,
    the files, the folders searched and how to get it."""
    card = CARDS[name]
    print(f"{name}: {card.what}")
    print(f"source: {card.source}")
    print(f"licence: {card.licence}")
    print(f"size: {card.size}")
    print(f"files: {' or '.join(DATASET_FILES[name])} (not found here)")
    print("put them in: " + ", or ".join(str(d) for d in search_dirs(data_dir, search)))
    if any(s.url for s in SOURCES.get(name, [])):
        print(f"get it: sheaf-fmtl data fetch {name}")
    else:
        print(f"get it: sheaf-fmtl data fetch {name} --url URL (no public address is known)")
    return 0


def main_data(args: argparse.Namespace) -> int:
    """Run one ``data`` sub-command; DatasetError is printed to stderr and gives exit status 2."""
    try:
        if args.data_command == "list":
            return cmd_list(Path(args.data_dir) if args.data_dir else None)
        if args.data_command == "describe":
            config = _describe_config(args)
            args.clients, args.seed, args.options = config.clients, config.seed, config.data
            args.data_dir = Path(config.data_dir) if config.data_dir else None
            args.data_search = config.data_search
            args.partition = PartitionSpec.of(config)
            return cmd_describe(args)
        if args.data_command == "fetch":
            dest = args.dest or user_data_dir()
            fetch(args.name, dest, url=args.url, sha256=args.sha256)
            if args.dest is not None:
                print(f"{args.name}: runs find it with --data-dir {dest} (or {ENV_VAR}={dest})")
            return 0
        raise DatasetError(f"unknown data command {args.data_command!r}")
    except (DatasetError, ConfigError) as e:
        print(error_line(e), file=sys.stderr)
        return 2


def run(argv: Sequence[str]) -> int:
    """``sheaf-fmtl data ARGV...`` without the main CLI (for tests and ``python -m``)."""
    parser = Parser(prog=PROG)
    add_parser(parser.add_subparsers(dest="command", required=True))
    try:
        args = parser.parse_args(["data", *argv])
    except UsageError as e:
        print(error_line(e), file=sys.stderr)
        return 2
    return main_data(args)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
