"""Auditing a corpus: many (problem, candidate) pairs, run in parallel, stored as they finish so
an interrupted run resumes where it stopped.

jobs      what to audit: a manifest or a directory layout, and each job's key
store     the SQLite database of finished jobs (each row sealed) and of jobs in flight
runnable  whether a problem can run on the device a slot audits on
slot      one long-lived audit process (per GPU or CPU slot) and the per-job function
pool      the local scheduler: slots, time limits, retries
cluster   the same on a Ray cluster: one task per job
progress  the line per finished job, throughput and time left
summary   outcomes by class and by problem, read back from the store
command   `kernelaudit corpus`
"""
