"""The registries of algorithms and map modes (``config.registry``): config's choices are the
registered entries, each entry's facts name real keys, an unknown name is refused when the config
is read (before any data is loaded), and an algorithm a user registers becomes a choice. Config
reads the registries as the entry points filled them (it imports nothing of the algorithms))."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

import sheaf_fmtl
from sheaf_fmtl.algorithms import ALGORITHMS, register
from sheaf_fmtl.algorithms.baselines.local import Local
from sheaf_fmtl.algorithms.maps.coordinates import COUPLED, CoordinateSheaf
from sheaf_fmtl.algorithms.protocol.algorithm import MAP_MODE_IMPLEMENTATIONS, register_maps
from sheaf_fmtl.config import ConfigError, RunConfig, registry
from sheaf_fmtl.config.registry import MapModeSpec
from sheaf_fmtl.config.schema import key_fields
from sheaf_fmtl.config.values import choices
from sheaf_fmtl.data.base import READERS
from sheaf_fmtl.data.base import register as register_dataset
from sheaf_fmtl.plots.labels import algorithm_name, long_label
from sheaf_fmtl.plots.style import PALETTE

KEYS = set(key_fields())


def test_config_choices_are_the_registered_entries() -> None:
    assert choices("algorithm") == tuple(registry.ALGORITHMS) and set(registry.ALGORITHMS) == set(ALGORITHMS)
    assert choices("maps") == (registry.AUTO, *registry.MAP_MODES)
    assert set(registry.MAP_MODES) == set(MAP_MODE_IMPLEMENTATIONS)


@pytest.mark.parametrize("name", list(registry.algorithm_names()))
def test_every_algorithm_entry_names_real_keys_and_a_palette_colour(name: str) -> None:
    spec = registry.algorithm_spec(name)
    assert spec is not None and spec.display and algorithm_name({"algorithm": name}) == spec.display
    assert set(spec.step_keys) <= KEYS and set(spec.reads) <= KEYS, name
    assert spec.color is None or 0 <= spec.color < len(PALETTE)


@pytest.mark.parametrize("mode", [m for m in registry.map_mode_names() if m != registry.AUTO])
def test_every_map_mode_entry_names_real_keys_and_a_label(mode: str) -> None:
    spec = registry.map_mode_spec(mode)
    assert spec is not None and set(spec.reads) <= KEYS and spec.default_lam > 0
    assert spec.label in long_label({"algorithm": "sheaf-fmtl", "maps": mode, "eta": 0.1, "lam": 0.1})
    assert RunConfig(maps=mode).maps == mode


@pytest.mark.parametrize(
    ("keys", "hint"),
    [
        ({"algorithm": "fedavgg"}, "did you mean algorithm='fedavg'"),
        ({"maps": "redrawm"}, "did you mean maps='redrawn'"),
    ],
)
def test_an_unknown_name_is_refused_before_any_data_is_loaded(keys: dict[str, str], hint: str) -> None:
    loaded = []

    def dataset() -> None:  # never called: the config is refused first
        loaded.append(True)

    with pytest.raises(ConfigError, match=hint):
        RunConfig(**keys)
    with pytest.raises(ConfigError, match=hint):
        sheaf_fmtl.run(dataset=dataset, rounds=1, **keys)
    assert not loaded


def test_an_algorithm_a_user_registers_is_a_choice() -> None:
    with pytest.raises(ConfigError):
        RunConfig(algorithm="my-local")
    register("my-local", display="my local training")(type("MyLocal", (Local,), {}))
    try:
        assert RunConfig(algorithm="my-local").algorithm == "my-local"
        assert algorithm_name({"algorithm": "my-local"}) == "my local training"
    finally:
        del ALGORITHMS["my-local"], registry.ALGORITHMS["my-local"]


def test_every_coordinate_mode_has_an_initial_state() -> None:
    coordinate = {m for m, cls in MAP_MODE_IMPLEMENTATIONS.items() if cls is CoordinateSheaf}
    assert coordinate == set(COUPLED) and coordinate <= set(registry.MAP_MODES)


def _fresh(code: str) -> str:
    """``code`` run by a new interpreter (nothing imported yet); its output."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout


@pytest.mark.slow
def test_config_reads_the_registries_that_fill_on_the_first_lookup() -> None:
    """Config imports nothing of the algorithms: importing it leaves them unimported, and the first
    lookup fills the registries through the package root, so a config built right after ``from
    sheaf_fmtl.config import RunConfig`` (or read with ``load_config``) is checked against every
    built-in entry; an entry of the user's registered first does not hide them."""
    out = _fresh(
        "import sys\n"
        "from sheaf_fmtl.config import RunConfig, load_config, registry\n"
        "assert 'sheaf_fmtl.algorithms' not in sys.modules\n"
        "print(RunConfig(algorithm='dfedu', maps='learned').algorithm)\n"
        "assert 'sheaf_fmtl.algorithms' in sys.modules\n"
        "print(load_config(None, ['maps=redrawn']).maps)\n"
    )
    assert out.split() == ["dfedu", "redrawn"]
    out = _fresh(
        "from sheaf_fmtl.config import registry\n"
        "registry.add_algorithm(registry.AlgorithmSpec('mine', 'Mine'))\n"
        "print(sorted({'mine', 'dfedu', 'local'} & set(registry.algorithm_names())))\n"
    )
    assert out.split() == ["['dfedu',", "'local',", "'mine']"]


@pytest.mark.slow
def test_a_root_without_the_hook_is_refused_with_the_one_message() -> None:
    out = _fresh(
        "import sheaf_fmtl\n"
        "del sheaf_fmtl.fill_registries\n"
        "from sheaf_fmtl.config import RunConfig, registry\n"
        "try:\n"
        "    RunConfig()\n"
        "except RuntimeError as e:\n"
        "    print(str(e) == registry.NOT_FILLED)\n"
    )
    assert out.split() == ["True"]


@pytest.mark.slow
def test_the_command_line_lists_every_registered_choice() -> None:
    out = _fresh("from sheaf_fmtl.cli import main\nmain(['run', '--help-keys'])\n")
    assert all(name in out for name in (*registry.algorithm_names(), *registry.map_mode_names()))


def test_labels_of_a_map_mode_come_from_its_entry() -> None:
    """A run whose maps did not move is labelled as the mode its entry names (``idle_as``); a
    recorded config without ``maps`` as the one mode marked ``unrecorded``."""
    modes = [registry.map_mode_spec(m) for m in registry.map_mode_names() if m != registry.AUTO]
    assert sum(spec.unrecorded for spec in modes if spec is not None) == 1
    unrecorded = registry.unrecorded_map_mode()
    assert unrecorded is not None
    for spec in modes:
        assert spec is not None and (spec.idle_as is None or spec.idle_as in registry.MAP_MODES)
        idle = registry.map_mode_spec(spec.idle_as or spec.name)
        assert idle is not None and idle.label in long_label(
            {"algorithm": "sheaf-fmtl", "maps": spec.name, "eta": 0.0, "lam": 0.1}
        )
    spec = registry.map_mode_spec(unrecorded)
    assert spec is not None and spec.label in long_label({"algorithm": "sheaf-fmtl", "eta": 0.1, "lam": 0.1})


def _local_class() -> type:
    return type("Another", (Local,), {})


@pytest.mark.parametrize(
    "add, message",
    [
        (lambda: register("local")(_local_class()), "algorithm 'local' is registered already"),
        (lambda: register("two words")(_local_class()), "algorithm name 'two words'"),
        (lambda: register("fine", step_keys="alpha")(_local_class()), "step_keys = 'alpha'; give a tuple"),
        (lambda: register("fine", color="red")(_local_class()), "color = 'red'"),
        (
            lambda: register("fine")(lambda config: Local(config)),
            "register a class over the Algorithm protocol",
        ),
        (lambda: register("fine")(type("Bare", (), {})), "Bare has no init, local, send, receive"),
        (lambda: register_maps(MapModeSpec("redrawn", "x", 1.0))(_local_class()), "'redrawn' is registered"),
        (lambda: register_maps(MapModeSpec("auto", "x", 1.0))(_local_class()), "'auto' is registered"),
        (lambda: register_maps(MapModeSpec("new", "x", -1.0))(_local_class()), "default_lam = -1.0"),
        (lambda: register_maps("new")(_local_class()), "with a MapModeSpec, not str"),
        (lambda: register_dataset("school")(lambda request: None), "dataset 'school' is registered already"),
        (lambda: register_dataset("mine", files="x.csv")(lambda request: None), "give a tuple of paths"),
        (lambda: register_dataset("mine")(_local_class()), "register a function request -> data"),
    ],
)
def test_a_registry_refuses_a_duplicate_a_bad_spec_and_a_function_for_a_class(add, message) -> None:
    before = (dict(ALGORITHMS), dict(registry.ALGORITHMS), dict(registry.MAP_MODES), dict(READERS))
    with pytest.raises(ValueError, match=re.escape(message)):
        add()
    assert (dict(ALGORITHMS), dict(registry.ALGORITHMS), dict(registry.MAP_MODES), dict(READERS)) == before
