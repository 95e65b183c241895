"""What the auditor and the worker hold in common: the messages between them, the memory both
map, and the conventions both apply to it."""
