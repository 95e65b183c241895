"""Running a candidate in isolation, and what the auditor observes of its runs.

The folders are the two sides of the trust boundary and what lies on it:

- `auditor/`, the trusted side, in the auditor's process: `process.Worker` starts the child
  (`launch`, in the sandbox of `sandbox`, with the host threads of `threads`; the command's
  first one ahead of torch's import, `prestart`), talks to it over `channel`, bounds its
  memory, disk and time (`limits`), and reads each call's buffers itself after the reply
  (`observed`): guard bands, the inputs a call may not write, the outputs. `preflight` checks
  a candidate's source before it runs.
- `worker/`, the untrusted side, inside the candidate's process: `main` imports the candidate
  and answers invocations; `call` runs each call on fresh guarded buffers (`placing`,
  `staging`), under `contention` and `threaded` for the races check. The worker's own
  observations (`watch`, `overlap`, `autotuners`) go back in the reply, where a candidate
  that reaches them could forge them: docs/threat-model.md says which of them the auditor
  checks itself. Nothing in the auditor's process imports this folder.
- `boundary/`, what both sides hold in common: the messages (`messages`) and their encoding
  (`wire`), the memory they share (`shared`, in `memory_file`s) or the auditor lends (`lent`)
  and its layout (`arena`), and the conventions both apply to it: canary bands (`guard`),
  poison (`poison`), the process-wide state a call must leave alone (`state`), how a failed
  call is told (`failures`) and how a call's device memory is read (`memory`).

`candidate` names a candidate and loads it, for every process that runs one.
"""
