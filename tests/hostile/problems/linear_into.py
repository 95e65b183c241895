"""The linear problem with the output passed in: the candidate is called as (x, w, y) and fills
y[m, n] = x @ w.T."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kernelaudit import Contract
from kernelaudit.problem.load import load_problem

problem = replace(
    load_problem(Path(__file__).with_name("linear.py")),
    name="linear_into",
    contract=Contract(style="destination"),
    description=__doc__ or "",
)
