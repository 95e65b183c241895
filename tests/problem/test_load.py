from pathlib import Path

import pytest

from kernelaudit.errors import ProblemError, UsageError
from kernelaudit.problem.load import load_problem

FIXTURES = Path(__file__).parent / "fixtures"


def test_a_valid_problem_loads_with_its_source_recorded() -> None:
    problem = load_problem(FIXTURES / "good.py")
    assert problem.name == "scale"
    assert problem.source.endswith("good.py")
    assert [i.name for i in problem.inputs] == ["x", "scale"]
    assert problem.workloads[0].as_dict() == {"rows": 4, "cols": 8}


@pytest.mark.parametrize(
    ("fixture", "field", "words", "line"),
    [
        ("unknown_field.py", "Problem.wrkloads", "did you mean 'workloads'", 10),
        ("undeclared_axis.py", "shape", "did you mean 'hidden'", 12),
        ("bad_signature.py", "reference", "exactly the inputs", None),
        ("no_problem.py", "problem", "add `problem = Problem(", None),
        ("syntax_error.py", "syntax", "syntax", 3),
        ("workload_missing_axis.py", "workloads[0]", "'cols'", None),
        ("bad_index_bound.py", "bound", "vocab, tokens, hidden", 16),
        ("dtype_as_string.py", "dtype", "torch.int64", 14),
    ],
)
def test_malformed_problems_name_the_file_the_field_and_the_fix(
    fixture: str, field: str, words: str, line: int | None
) -> None:
    with pytest.raises(ProblemError) as raised:
        load_problem(FIXTURES / fixture)
    error = raised.value
    message = str(error)
    assert fixture in message
    assert field in error.field
    assert words in message
    assert "fix:" in message
    if line is not None:
        assert error.line == line


def test_a_missing_problem_file_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="does not exist"):
        load_problem(FIXTURES / "nope.py")
