//! The Anthropic Messages API provider.
