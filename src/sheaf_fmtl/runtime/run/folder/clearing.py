"""What the library writes into the run folders it owns (:mod:`.rundir`), and clearing it: only
what :data:`OWNED` or the folder's ledger (:mod:`.ledger`) names, in marked folders (a logger's store
folder it created goes whole, :data:`STORE`), never following a symbolic link; anything else in the
folder stays, and a command never replaces a file it did not write (:func:`check_replaceable`)."""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from .folderlock import MARKER, FolderError, is_marked, set_kind
from .ledger import LEDGER, owned_names, record_owned
from .rundir import CHECKPOINTS, _entries, check_out_dir, mark, marker_kind

#: What the library writes into a run folder (a run, a cell, plots, ``run --seeds``, the demo).
OWNED = re.compile(
    r"config\.yaml|metrics\.csv|summary\.json|checkpoint\.pt|preprocessing\.json|cell\.json|aggregate\.(json|md)"
    r"|demo\.(json|png|pdf|svg)|(metric_vs_rounds_and_bits|map_norms_.*|edge_weights_.*)\.(png|pdf|svg)"
    r"|\.(config\.yaml|metrics\.csv|summary\.json|checkpoint\.pt|preprocessing\.json)\.tmp.*"
    r"|\.?best\.pt(\.tmp.*)?"  # the best evaluation's models (early stopping), and their temporary file
)


def claim_entry(folder: Path | None, path: Path) -> None:
    """Before sheaf-fmtl creates ``path`` (a shipped callback's file or folder): when it lies inside
    the run folder ``folder`` and the entry of ``folder`` that holds it does not exist yet, record
    that entry in the ledger (``--overwrite`` then clears it). An entry that exists already (a
    folder of yours the file goes into) is never recorded: only what the library creates is."""
    if folder is None:
        return
    try:
        rel = path.resolve().relative_to(folder.resolve())
    except (OSError, ValueError):
        return  # outside the run folder: none of its business
    if not rel.parts:
        return
    top = folder / rel.parts[0]
    if not (top.exists() or top.is_symlink()) and not OWNED.fullmatch(top.name) and top.name != CHECKPOINTS:
        record_owned(folder, [top.name])


def check_replaceable(folder: str | Path, names: Iterable[str], flag: str = "--out") -> None:
    """FolderError when ``folder`` holds an entry named in ``names`` that sheaf-fmtl did not write
    (not in its ledger, nor a run folder's own file): a command never replaces a file of yours."""
    p = Path(folder)
    ours = owned_names(p)
    for name in names:
        path = p / name
        if not (path.exists() or path.is_symlink()) or name in ours:
            continue
        if is_marked(p) and OWNED.fullmatch(name):
            continue
        raise FolderError(
            f"{path} exists and was not written by sheaf-fmtl; it is never replaced: choose another "
            f"{flag} or move the file (nothing was changed)"
        )


#: What a folder sheaf-fmtl created (one its parent's ledger names) holds of its own beyond what its
#: own ledger names: the event files of a ``log_tensorboard`` folder, which TensorBoard names.
CREATED = re.compile(r"events\.out\.tfevents\..*")
#: The mark of a store folder a logger created (MLflow's ``mlruns``, W&B's ``wandb``): MLflow and
#: W&B name what they write there, so a folder sheaf-fmtl created with this mark goes whole.
STORE = ".sheaf-fmtl-store"


def clear(path: Path, depth: int = 8, created: bool = False) -> bool:
    """Remove what the library wrote under the marked folder ``path``: :data:`OWNED` files and
    ``checkpoints/`` in marked folders, what a folder's ledger names, and in a folder sheaf-fmtl
    created (``created``: its parent's ledger names it) what it wrote there (:data:`CREATED`);
    folders left empty go, a folder that still holds a file of yours stays with it. The subfolders
    of a single run's folder (marker kind ``run``, its ``config.yaml`` there) are left alone but
    for ``checkpoints/`` and the ones its ledger names: a run writes no folder of runs, so a copy
    of a run kept in it is yours.
    Never through or of a symbolic link. Whether anything was removed."""
    marked = is_marked(path)
    ledger = owned_names(path) if marked or created else set()
    single = marked and marker_kind(path) == "run" and (path / "config.yaml").is_file()  # (a run's own)
    removed = False
    for child in path.iterdir():
        if child.name in (MARKER, LEDGER) or child.is_symlink():
            continue
        if child.is_dir():
            checkpoints, made = marked and child.name == CHECKPOINTS, created or child.name in ledger
            if single and not (checkpoints or made):
                continue
            if made and (child / STORE).is_file():  # a logger's store: what MLflow or W&B wrote
                shutil.rmtree(child)  # (links inside are removed, never followed)
                removed = True
                continue
            removed |= _clear_folder(child, depth, checkpoints, made)
        elif (
            (marked and OWNED.fullmatch(child.name))
            or child.name in ledger
            or (created and CREATED.fullmatch(child.name))
        ):
            child.unlink()
            removed = True
    if ledger:  # (what it named is gone, but for a folder that still holds a file of yours)
        left = {n for n in ledger if (path / n).exists() or (path / n).is_symlink()}
        (path / LEDGER).unlink(missing_ok=True)
        record_owned(path, left)
    return removed


def _clear_folder(child: Path, depth: int, checkpoints: bool, created: bool) -> bool:
    """:func:`clear` of one subfolder; it goes once nothing is left in it."""
    if checkpoints:
        shutil.rmtree(child)  # (only shards and manifests; rmtree removes links inside, never their targets)
        return True
    if depth <= 0:
        return False
    removed = clear(child, depth - 1, created)
    if (removed or created) and not _entries(child):
        (child / MARKER).unlink(missing_ok=True)
        (child / LEDGER).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            child.rmdir()
        return True
    return removed


def prepare_out_dir(path: str | Path, overwrite: bool = False, kind: str = "run") -> Path:
    """Check ``path`` (:func:`check_out_dir`), clear what the library wrote there when
    ``overwrite``, and create it with its marker."""
    p = check_out_dir(path, overwrite)
    cleared = p.is_dir() and overwrite and is_marked(p)
    if cleared:
        clear(p)
    if p.is_dir():
        drop_links(p)
    mark(p, kind)
    if cleared and marker_kind(p) != kind:
        set_kind(p, kind)  # what it is now: a sweep's folder overwritten by a run is a run's
    return p


def drop_links(path: Path) -> list[str]:
    """Remove the symbolic links in ``path`` named like what the library writes (:data:`OWNED`,
    ``checkpoints``): the links, never what they point to, so nothing is written through one.
    The names removed."""
    gone = []
    for child in path.iterdir():
        if child.is_symlink() and (child.name == CHECKPOINTS or OWNED.fullmatch(child.name)):
            child.unlink()
            gone.append(child.name)
    return gone
