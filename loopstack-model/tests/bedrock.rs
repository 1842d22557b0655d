//! Bedrock against a strict imitation of its API (being written).
