import json
from pathlib import Path

import pytest

from kernelaudit.corpus import jobs as corpus_jobs
from kernelaudit.corpus.jobs import Job, changed_files, discover, keyed
from kernelaudit.errors import UsageError

ONE_FUNCTION = """
import triton

@triton.jit
def _tile(x_ptr):
    pass

@triton.autotune(configs=[], key=[])
@triton.jit
def tuned(x_ptr):
    pass

def _launch(x):
    return x

def copy(x):
    return _launch(x).clone()
"""
MODEL_NEW = (
    "import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n\ndef get_inputs():\n    pass\n"
)


def _write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_directory_layout_lists_every_candidate_of_every_problem_folder(tmp_path: Path) -> None:
    native = tmp_path / "softmax"
    problem = _write(native / "problem.py", "problem = ...")
    copy = _write(native / "candidates" / "copy.py", ONE_FUNCTION)
    model = _write(native / "candidates" / "model_new.py", MODEL_NEW)
    _write(native / "candidates" / "_shared.py", "def helper(x):\n    return x\n")
    _write(native / "candidates" / "notes.txt", "not a candidate")
    sol = tmp_path / "gemm_sol"
    _write(sol / "definition.json", "{}")
    _write(sol / "workload.jsonl", "{}\n")
    solution = _write(sol / "solutions" / "triton_v1.json", "{}")
    _write(tmp_path / "README.md", "corpus notes")

    jobs = discover(tmp_path)

    assert jobs == [
        Job(str(sol.resolve()), str(solution.resolve())),
        Job(str(problem.resolve()), f"{copy.resolve()}::copy"),
        Job(str(problem.resolve()), str(model.resolve())),
    ]


def test_a_single_problem_folder_is_a_corpus_of_its_own(tmp_path: Path) -> None:
    problem = _write(tmp_path / "problem.py", "problem = ...")
    copy = _write(tmp_path / "candidates" / "copy.py", ONE_FUNCTION)
    assert discover(tmp_path) == [Job(str(problem.resolve()), f"{copy.resolve()}::copy")]


def test_the_bundled_examples_are_a_corpus_their_expected_json_lists(tmp_path: Path) -> None:
    from kernelaudit.demo import find_examples, load_examples

    examples = find_examples()
    listed = {(j.problem, j.candidate) for j in discover(examples)}
    expected = load_examples(examples)
    assert listed == {
        (str(e.problem.resolve()), str(Path(e.candidate).resolve())) for e in expected
    }
    # a manifest that lists no candidate properly is named, with the fix
    _write(tmp_path / "ex" / "problem.py", "problem = ...")
    _write(tmp_path / "ex" / "expected.json", '{"candidates": [{"verdict": "PASS"}]}')
    with pytest.raises(UsageError, match=r"ex/expected.json: malformed example manifest"):
        discover(tmp_path)


def test_every_folder_that_matches_no_layout_is_named_in_one_error(tmp_path: Path) -> None:
    _write(tmp_path / "no_problem" / "candidates" / "copy.py", ONE_FUNCTION)
    _write(tmp_path / "no_candidates" / "problem.py", "problem = ...")
    _write(tmp_path / "two_functions" / "problem.py", "problem = ...")
    _write(
        tmp_path / "two_functions" / "candidates" / "k.py",
        "def fast(x):\n    pass\n\ndef faster(x):\n    pass\n",
    )
    _write(tmp_path / "broken" / "problem.py", "problem = ...")
    _write(tmp_path / "broken" / "candidates" / "k.py", "def fast(x:\n")

    with pytest.raises(UsageError) as raised:
        discover(tmp_path)

    message = str(raised.value)
    assert "4 problem(s)" in message
    assert "no_problem: no problem (definition.json or problem.py)" in message
    assert "no_candidates: no candidates/ or solutions/ folder (nor an expected.json)" in message
    assert "k.py: defines fast, faster" in message
    assert "broken/candidates/k.py:1: not valid Python" in message
    assert "docs/corpus.md" in message


def test_a_jsonl_manifest_resolves_paths_against_its_folder(tmp_path: Path) -> None:
    problem = _write(tmp_path / "problems" / "identity.py")
    kernel = _write(tmp_path / "kernels" / "copy.py")
    manifest = _write(
        tmp_path / "manifest.jsonl",
        json.dumps({"problem": "problems/identity.py", "candidate": "kernels/copy.py::copy"})
        + "\n\n"
        + json.dumps({"problem": str(problem), "candidate": str(kernel), "note": "extra"})
        + "\n",
    )
    assert discover(manifest) == [
        Job(str(problem.resolve()), f"{kernel.resolve()}::copy"),
        Job(str(problem.resolve()), str(kernel.resolve())),
    ]


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        (
            "m.jsonl",
            '{"problem": "p.py", "candidate": "k.py::f"}\n{"problem": "p.py"}\n',
            ["m.jsonl:2", "'candidate' is missing"],
        ),
        ("m.jsonl", '{"problem": "p.py", "candidate": "k.py::f"\n', ["m.jsonl:1", "not JSON"]),
        (
            "m.json",
            '[\n  {"problem": "p.py", "candidate": "k.py::f"},\n\n'
            '  {"problem": "gone.py", "candidate": "k.py::f"}\n]\n',
            ["m.json:4", "field 'problem'", "gone.py does not exist", "manifest's folder"],
        ),
        (
            "m.json",
            '[{"problem": "p.py", "candidate": "missing.py::f"}]',
            ["m.json:1", "field 'candidate'", "missing.py"],
        ),
        ("m.json", '{"problem": "p.py"}', ["m.json", "not a JSON list"]),
        ("m.json", "[]", ["lists no jobs"]),
        ("m.txt", "", ["neither a directory nor a manifest"]),
    ],
)
def test_manifest_errors_name_the_file_the_line_and_the_field(
    tmp_path: Path, name: str, text: str, words: list[str]
) -> None:
    _write(tmp_path / "p.py")
    _write(tmp_path / "k.py")
    with pytest.raises(UsageError) as raised:
        discover(_write(tmp_path / name, text))
    for word in words:
        assert word in str(raised.value)


def test_a_job_key_changes_with_the_candidate_and_how_it_is_audited(tmp_path: Path) -> None:
    problem = _write(tmp_path / "p.py", "problem = 1")
    kernel = _write(tmp_path / "k.py", "def f(x):\n    return x\n")
    job = Job(str(problem), f"{kernel}::f")

    def key(profile: str = "quick", checks: list[str] | None = None) -> str:
        return next(iter(keyed([job], profile, checks, tmp_path)))

    first = key()
    assert key() == first
    assert key(checks=["numerics", "execution"]) == key(checks=["execution", "numerics"])
    assert len({first, key("default"), key(checks=["execution"])}) == 3
    kernel.write_text("def f(x):\n    return x.clone()\n")
    assert key() != first
    assert len(keyed([job, job], "quick", None, tmp_path)) == 1


def test_a_job_audited_on_inputs_drawn_another_way_is_another_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a corpus resumed by a kernelaudit that draws its inputs otherwise audits every job again
    problem = _write(tmp_path / "p.py", "problem = 1")
    kernel = _write(tmp_path / "k.py", "def f(x):\n    return x\n")
    job = Job(str(problem), f"{kernel}::f")
    before = keyed([job], "quick", None, tmp_path)
    monkeypatch.setattr(corpus_jobs, "SCHEME", "another-scheme")
    assert keyed([job], "quick", None, tmp_path).keys() != before.keys()


def test_a_sol_execbench_folder_key_covers_its_workloads(tmp_path: Path) -> None:
    _write(tmp_path / "definition.json", "{}")
    workloads = _write(tmp_path / "workload.jsonl", '{"n": 1}\n')
    job = Job(str(tmp_path), str(_write(tmp_path / "solution.json", "{}")))
    before = keyed([job], "quick", None, tmp_path)
    workloads.write_text('{"n": 2}\n')
    assert keyed([job], "quick", None, tmp_path).keys() != before.keys()


def test_a_job_remembers_the_bytes_it_was_keyed_on_and_names_the_file_that_changed(
    tmp_path: Path,
) -> None:
    problem = _write(tmp_path / "p.py", "problem = 1")
    kernel = _write(tmp_path / "k.py", "def f(x):\n    return x\n")
    (job,) = keyed([Job(str(problem), f"{kernel}::f")], "quick", None, tmp_path).values()
    assert job == Job(str(problem), f"{kernel}::f")
    assert changed_files(job) == []

    problem.write_text("problem = 2")
    (change,) = changed_files(job)
    assert change.startswith(f"the problem {problem} changed after the run read it")
    kernel.write_text("def f(x):\n    return x.clone()\n")
    assert [c.split(" changed")[0] for c in changed_files(job)] == [
        f"the problem {problem}",
        f"the candidate {kernel}",
    ]
    # a job of no recorded digests (handed over by hand) has nothing to compare
    assert changed_files(Job(str(problem), f"{kernel}::f")) == []
