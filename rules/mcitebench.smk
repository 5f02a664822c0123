# mcitebench family rules: filled in by its issue
