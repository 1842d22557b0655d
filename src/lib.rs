//! loopstack facade (placeholder)
pub use loopstack_core::*;
