"""The trusted side of the runner: starting a candidate's processes in their sandbox, bounding
them, talking to them, and reading their calls' memory for itself."""
