//! The io layer under the shard loop: ring abstraction (real and fake), typed op keys,
//! generational slabs, send/receive buffers with kernel ownership tracking, timers, errno policy.
pub mod errno;
pub mod fake;
pub mod op_key;
pub mod recv_buf;
pub mod ring;
pub mod send_queue;
pub mod slab;
pub mod timer;
pub mod uring;
