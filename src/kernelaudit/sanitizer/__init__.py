"""NVIDIA compute-sanitizer run on the candidate: out-of-bounds and misaligned accesses
(memcheck), reads of uninitialised global memory (initcheck), barrier misuse (synccheck) and
shared-memory races (racecheck), each report pinned to the kernel that made it.

`locate` finds the tool, `cases` picks the small cases it runs, `child` is the program run
under it (the candidate called on those cases, with torch's caching allocator off so an
overrun leaves its allocation), `run` starts it with a time limit, `report` reads its text
output, `attribution` separates the candidate's kernels from library ones, and `session`
runs one audit's worth of tools within the profile's budget.
"""
