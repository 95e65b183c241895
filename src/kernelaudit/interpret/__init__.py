"""Triton kernels run by Triton's interpreter on the CPU, with every load, store and atomic of
every program checked against the tensors the kernel was launched with.

records  what comes back: plain values, checked on the way in
access   the instrumentation of the interpreter (runs in the child only)
child    the child process: the candidate called on guarded CPU tensors, accesses watched
run      the auditor's side: start the child in the background, collect what it saw
versions defects of the interpreter in the Triton and NumPy installed, which a run warns of
casts    the interpreter's float casts taken a faster way, the same bits (in every process that
         interprets a candidate's kernels)
patches  the interpreter's patching of the language's builtins, listed once instead of at every
         launch and device call (in the same processes)
"""
