//! The io layer under the shard loop: the ring abstraction (the real io_uring, and a scripted
//! one for tests), typed op keys, send and receive buffers with kernel ownership tracking,
//! the provided-buffer ring clients receive into, and the errno policy.
pub mod buf_ring;
pub mod errno;
#[cfg(test)]
pub mod fake;
pub mod op_key;
pub mod recv_buf;
pub mod ring;
pub mod send_queue;
pub mod uring;
