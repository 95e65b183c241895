"""The untrusted side of the runner: the worker process that imports the candidate and makes
its calls (`python -m kernelaudit.runner.worker.main`). Everything here runs beside the
candidate's code, which can reach and rebind it."""
