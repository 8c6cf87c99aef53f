"""Post-hoc analyses that re-judge or re-run parts of finished sweeps: judge robustness (Table 9), backbone stability (Table 11)."""
