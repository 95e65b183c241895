"""Running a candidate in isolation, and what the auditor observes of its runs.

The trusted side: `process.Worker` starts the child (`launch`, in the sandbox of `sandbox`,
with the host threads of `threads`; the command's first one ahead of torch's import,
`prestart`), sends it invocations through `channel` and `wire` (`messages` is what crosses),
lends it device memory (`lent`) and shared regions (`shared`) for its calls' buffers, and reads
those buffers itself after each call (`observed`, `arena`, with `guard`'s comparisons): guard
bands, the inputs a call may not write, the outputs. `limits` bounds the child's memory, disk
and time; `candidate` and `preflight` name and check a candidate before it runs; `failures`
tells why a call failed.

The untrusted side, inside the child: `worker` imports the candidate and answers invocations;
`call` runs each call on fresh guarded buffers (`placing`, `guard`, `staging`) with `poison`
filling memory the candidate should write before reading, under `contention` and `threaded`
for the races check. The worker's own observations (`watch`, `state`, `memory`, `overlap`,
`autotuners`) go back in the reply, where a candidate that reaches them could forge them:
docs/threat-model.md says which of them the auditor checks itself.
"""
