"""The readers of spec and workload files: each model reads its own files over
``jaxqueue._document``, and each error is one line naming the file (or the spec) and the
field."""

import json

import numpy as np
import pytest

from jaxqueue import _document, networks, pools, sched
from jaxqueue.mjqm._files import load_workload
from jaxqueue.pools import structured


def _write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def _one_line_error(fn, *args) -> str:
    with pytest.raises(ValueError) as info:
        fn(*args)
    text = str(info.value)
    assert len(text.splitlines()) == 1, text
    return text


def test_read_document(tmp_path):
    path = _write(tmp_path, "d.toml", "a = 1\n")
    assert _document.read_document(path) == {"a": 1}
    bad = _write(tmp_path, "d.json", "[1]")
    assert _one_line_error(_document.read_document, bad) == (
        f"{bad}: the document must be a table (an object), got a list"
    )


def test_pool_files(tmp_path):
    path = _write(tmp_path, "p.toml", "server_sets = [[0, 1], [1]]\nlam = [0.5, 0.2]\n")
    pool, lam = pools.read_pool(path)
    assert pool.server_sets == ((0, 1), (1,)) and np.asarray(pool.mu).tolist() == [1.0, 1.0]
    assert lam == [0.5, 0.2]
    typed = _write(tmp_path, "t.json", {"counts": [2, 3], "type_sets": [[0], [0, 1]]})
    pool, lam = pools.read_pool(typed)
    assert pool.counts == (2, 3) and lam is None


def test_pool_fields_for_the_scheduler(tmp_path):
    # the sets and capacities as written (a capacity 0 is the scheduler's to judge)
    path = _write(tmp_path, "s.json", {"server_sets": [[0, 2], [1]], "mu": [1.0, 0.0, 2.0]})
    sets, mu, lam = pools.read_pool_fields(path)
    assert sets == [[0, 2], [1]] and mu.tolist() == [1.0, 0.0, 2.0] and lam is None
    typed = _write(tmp_path, "t.json", {"counts": [2], "type_sets": [[0]]})
    assert _one_line_error(pools.read_pool_fields, typed).startswith(f"{typed}: a typed pool")


@pytest.mark.parametrize(
    "doc,fragments",
    [
        ({"server_sets": [[0, 5]], "mu": [1.0, 1.0]}, ["server_sets[0] has server indices [5]"]),
        ({"server_sets": [[0]], "mu": [1.0], "speed": 2}, ["unknown key(s) ['speed']"]),
        ({"mu": [1.0]}, ["needs a 'server_sets' entry"]),
        ({"counts": [2, 0], "type_sets": [[0]]}, ["counts[1] must be an integer >= 1"]),
        ({"counts": [2], "type_sets": [[0]], "speed": 1}, ["unknown key(s) ['speed']"]),
        ({"counts": [2]}, ["needs 'type_sets'"]),
        ("server_sets = [[0]\n", ["invalid TOML"]),
    ],
)
def test_pool_file_errors_name_the_file_and_field(tmp_path, doc, fragments):
    name = "bad.toml" if isinstance(doc, str) else "bad.json"
    path = _write(tmp_path, name, doc)
    text = _one_line_error(pools.read_pool, path)
    assert text.startswith(f"{path}: ") and all(f in text for f in fragments), text


def test_network_files(tmp_path):
    doc = {"queues": [[[0]], [[1]]], "mu": [2.0, 2.0], "routing": [[0, 1], [0, 0]], "nu": [1, 0]}
    net = networks.read_network(_write(tmp_path, "net.json", doc))
    assert net.n_pools == 2 and net.n_classes == 2
    for change, fragment in (
        ({"pools": 1}, "unknown keys ['pools']"),
        ({"mu": ["a", "b"]}, "mu: not a numeric array"),
        ({"routing": [[0, 1.5], [0, 0]]}, "routing"),
    ):
        path = _write(tmp_path, "bad.json", {**doc, **change})
        text = _one_line_error(networks.read_network, path)
        assert text.startswith(f"{path}: ") and fragment in text, text


def test_workload_file_errors_name_the_file_and_field(tmp_path):
    doc = {"servers": 4, "classes": [{"cores": 5, "prob": 1.0, "law": "exponential", "mean": 1}]}
    path = _write(tmp_path, "wl.json", doc)
    text = _one_line_error(load_workload, path)
    assert text == f"{path}: classes[0].cores: 5 exceeds servers (4)"


def test_scheduler_random_spec():
    assert sched.parse_random_spec("random:S=10,d=2") == (10, 2, 1.0)
    assert sched.parse_random_spec("random:K=10,d=3,mu=2") == (10, 3, 2.0)
    for spec, fragment in (
        ("random:S=10,K=10,d=2", "exactly one of S or K"),
        ("random:S=10", "exactly one of S or K, and d"),
        ("random:S=x,d=2", "must be integers"),
        ("random:S=10,d=2,p=1", "unknown key 'p'"),
        ("random:S=10,d=2,d=3", "given twice"),
    ):
        assert fragment in _one_line_error(sched.parse_random_spec, spec)


@pytest.mark.parametrize(
    "spec,fragment",
    [
        ("line:K=10,d=2+3", "d takes one value for line pools"),
        ("random:K=10,d=2,d=3", "key 'd' given twice"),
        ("random:K=10,d=2,q=1", "unknown key 'q' for random pools"),
        ("random:K=10,d", "must be key=value"),
        ("random:K=10,d=2+3,p=0.5", "one share per degree"),
        ("random:K=10,d=2+3,p=0.6+0.6", "summing to 1"),
        ("ring:K=10,d=2,mu=0", "mu must be > 0"),
        ("grid:K=10", "unknown pool structure 'grid'"),
    ],
)
def test_structure_spec_errors(spec, fragment):
    text = _one_line_error(structured.parse_spec, spec)
    assert fragment in text and repr(spec) in text, text
