# images family rules: filled in by its issue
