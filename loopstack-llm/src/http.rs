//! Shared HTTP plumbing of the providers: retries, SSE, error decoding.
