# m2rag family rules: filled in by its issue
