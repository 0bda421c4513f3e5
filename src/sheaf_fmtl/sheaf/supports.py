"""Which coordinates of two models mean the same thing: the supports of ``maps=features`` and
``maps=aligned`` (:mod:`.selection`).

- Features: tabular clients whose columns are known ids in one shared feature space. The models are
  ``nn.Linear``: ``theta = [W (outputs x width, row-major), b (outputs)]``. An edge ``{i, j}`` with
  shared features ``S = F_i & F_j`` couples ``W_i[:, S]`` with ``W_j[:, S]`` (``S`` in increasing id)
  and ``b_i`` with ``b_j``: the paper's hybrid-FL selection matrices between two clients.
- Aligned: clients with different architectures (e.g. the paper's Small/Medium/Large CNNs). Their
  parameters are matched by role (the k-th convolution from the input, the k-th linear layer from
  the output) and a matched pair shares the leading slice of its first two dimensions (output and
  input channels / units), HeteroFL-style, when the remaining dimensions (kernels) agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn


def linear_columns(columns: Sequence[int] | np.ndarray, width: int, outputs: int) -> np.ndarray:
    """Coordinates of ``W[:, columns]`` (output by output) and then ``b`` in a flat ``nn.Linear``
    ``theta = [W (outputs x width), b]``."""
    c = np.asarray(columns, np.int64)
    w = (np.arange(outputs)[:, None] * width + c[None, :]).reshape(-1)
    return np.concatenate([w, outputs * width + np.arange(outputs)])


def feature_support(features_i: np.ndarray, features_j: np.ndarray, outputs: int) -> np.ndarray:
    """Client ``i``'s coordinates of the edge ``{i, j}``: the weights of the features both see (in
    increasing feature id) and the biases. ``features_*``: the ids of each client's columns."""
    shared = np.intersect1d(features_i, features_j)  # sorted
    where = {int(g): c for c, g in enumerate(np.asarray(features_i).tolist())}
    return linear_columns([where[int(g)] for g in shared], len(features_i), outputs)


# One parameter: (role, shape, offset into the flat theta).
Param = tuple[tuple[str, int, str], tuple[int, ...], int]


def parameter_roles(module: nn.Module) -> list[Param]:
    """Each parameter of ``module`` with its role ``(layer kind, k, name)``: convolutions counted
    from the input (``k = 0, 1, ...``), linear layers from the output (``k = 0`` is the last), in the
    order of the flat ``theta`` (``module.parameters()``)."""
    offsets, at = {}, 0
    for name, p in module.named_parameters():
        offsets[name] = at
        at += p.numel()
    convs = [m for m in module.modules() if isinstance(m, nn.Conv1d | nn.Conv2d | nn.Conv3d)]
    linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
    out: list[Param] = []
    for prefix, m in module.named_modules():
        if m in convs:
            kind, k = "conv", convs.index(m)
        elif m in linears:
            kind, k = "linear", len(linears) - 1 - linears.index(m)
        else:
            continue
        for pname, p in m.named_parameters(recurse=False):
            full = f"{prefix}.{pname}" if prefix else pname
            out.append(((kind, k, pname), tuple(p.shape), offsets[full]))
    return out


def _slice(shape_a: tuple[int, ...], shape_b: tuple[int, ...]) -> tuple[slice, ...] | None:
    """The leading slice two parameters share, or ``None`` (other rank or other kernel)."""
    if len(shape_a) != len(shape_b) or shape_a[2:] != shape_b[2:]:
        return None
    return tuple(slice(0, min(a, b)) for a, b in zip(shape_a, shape_b, strict=True))


def _coords(shape: tuple[int, ...], offset: int, cut: tuple[slice, ...]) -> np.ndarray:
    return offset + np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)[cut].reshape(-1)


def aligned_support(module_i: nn.Module, module_j: nn.Module) -> tuple[np.ndarray, np.ndarray]:
    """The coordinates of ``theta_i`` and of ``theta_j`` that an edge between the two architectures
    couples, position by position (see the module docstring)."""
    roles_i = {role: (shape, off) for role, shape, off in parameter_roles(module_i)}
    roles_j = {role: (shape, off) for role, shape, off in parameter_roles(module_j)}

    def cut_of(role: tuple[str, int, str]) -> tuple[slice, ...] | None:
        if role not in roles_i or role not in roles_j:
            return None
        return _slice(roles_i[role][0], roles_j[role][0])

    ci, cj = [], []
    for role, (shape, off) in roles_i.items():
        cut = cut_of(role)
        weight = (role[0], role[1], "weight")
        if role[2] != "weight" and weight in roles_i and cut_of(weight) is None:
            continue  # a layer's other parameters (bias) are shared only with its weight
        if cut is not None:
            shape_j, off_j = roles_j[role]
            ci.append(_coords(shape, off, cut))
            cj.append(_coords(shape_j, off_j, cut))
    empty = np.zeros(0, np.int64)
    return (np.concatenate(ci) if ci else empty), (np.concatenate(cj) if cj else empty)


def align_initial_models(
    modules: Sequence[nn.Module], references: Sequence[torch.Tensor], held: Sequence[tuple[int, torch.Tensor]]
) -> list[torch.Tensor]:
    """Initial models whose shared slices start equal. ``modules``: every architecture of the
    federation, ``references``: one initial flat model ``[d_a]`` of each (the same in every
    process). Per role, one tensor of the largest shape is filled position by position from the
    first architecture (in the given order) that has that position; each held cohort ``(a, thetas
    [C, d_a])`` takes its leading slice of it in every row (the rest is kept)."""
    out = [t.clone() for _, t in held]
    groups: dict[tuple[str, int, str], list[tuple[int, tuple[int, ...], int]]] = {}
    for a, module in enumerate(modules):
        for role, shape, off in parameter_roles(module):
            groups.setdefault(role, []).append((a, shape, off))
    for members in groups.values():
        if len(members) < 2:
            continue
        ndim = len(members[0][1])
        same = [m for m in members if len(m[1]) == ndim and m[1][2:] == members[0][1][2:]]
        big = tuple(max(m[1][k] for m in same) for k in range(ndim))
        full = torch.zeros(big, dtype=references[0].dtype)
        filled = torch.zeros(big, dtype=torch.bool)
        for a, shape, off in same:
            cut = tuple(slice(0, s) for s in shape)
            own = references[a][off : off + int(np.prod(shape))].detach().cpu().view(shape)
            region = full[cut]
            region[~filled[cut]] = own[~filled[cut]]
            filled[cut] = True
        for a, shape, off in same:
            cut = tuple(slice(0, s) for s in shape)
            for k, (arch, thetas) in enumerate(held):
                if arch == a:
                    slab = full[cut].reshape(1, -1).to(device=thetas.device, dtype=thetas.dtype)
                    out[k][:, off : off + int(np.prod(shape))] = slab
    return out
