"""The contracts: records, instances, role and client Protocols, errors, and the score."""
