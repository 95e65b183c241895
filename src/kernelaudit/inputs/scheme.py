"""How kernelaudit draws its inputs, by name: what a report and a corpus job record, so that
results drawn another way are told apart. Kept apart from `inputs.draws` so that reading it
imports neither torch nor NumPy (the corpus keys its jobs before any audit starts)."""

SCHEME = "numpy-sfc64"
"""How floating values are drawn (`inputs.draws`), as a report's environment records it (under
`RECORDED_AS`): a report made by another scheme replays other values for the same case
(`kernelaudit repro` says so), and a corpus job audited by another scheme is another job."""

RECORDED_AS = "input draws"
"""The name `SCHEME` goes by in a report's environment."""
