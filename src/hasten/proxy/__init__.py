"""The request path: validation, cache lookup, coalescing, the upstream call, the answer back."""
