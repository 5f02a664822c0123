"""citeforge stages: one module per pipeline stage, shared machinery in stages.core."""
