"""Problems: what should be computed, and the native format that declares it."""
