"""Running a candidate in isolation.

`candidate` names and loads candidate kernels; `process.Worker` runs one in a child process
(`worker`) with a timeout, crash containment and a restart after either; inside the child,
`guard` surrounds every tensor with canary bytes and `poison` fills memory the candidate
should write before reading. `messages` is what crosses between the two processes.
"""
