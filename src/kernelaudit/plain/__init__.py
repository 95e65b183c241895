"""The candidate called as a user's program would call it: in a fresh process of its own, by a
short script that imports nothing of kernelaudit, on plain tensors, many times over
(`plain.caller`); the trusted side writes the request and reads the result (`plain.run`)."""
