"""Private machinery with no protocol meaning: async helpers, file IO, names, secrets, start-up, versions."""
