"""Large tensors: a case whose largest tensor holds more than 2^31 elements, where a kernel that
computes offsets in 32-bit integers reads and writes the wrong memory.

`sizing` picks the case (a batch axis grown from the first workload), `run` runs the candidate
on it in a process of its own (`child`), which draws the inputs on the device and sends back
only a few rows; `kernelaudit.checks.large_tensors` judges those rows against the truth.
"""
