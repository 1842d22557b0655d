//! The OpenAI Chat Completions provider.
