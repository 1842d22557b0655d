pub use loopstack_core;
