//! The one place that decides what an errno from a completion means for its connection.

/// What the shard does with a failed operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrnoAction {
    /// Submit the same operation again (later, for buffer shortage).
    Retry,
    /// The peer or the network ended the connection: close it, no noise in the log.
    Close,
    /// The operation was cancelled by us during teardown: nothing to do.
    Cancelled,
    /// The shard used the kernel wrongly: log loudly, close the connection.
    Bug,
}

/// Classifies a negative completion result (`-errno`) or a raw errno.
pub fn classify(errno: i32) -> ErrnoAction {
    match errno.abs() {
        // Interrupted or would block: the op made no progress and may simply be submitted again.
        libc::EINTR | libc::EAGAIN => ErrnoAction::Retry,
        // A provided-buffer ring ran dry or the kernel was short of memory: re-arm later.
        libc::ENOBUFS | libc::ENOMEM => ErrnoAction::Retry,
        // Our own AsyncCancel or teardown ended it.
        libc::ECANCELED => ErrnoAction::Cancelled,
        // The peer went away or never answered.
        libc::ECONNRESET | libc::EPIPE | libc::ECONNREFUSED | libc::ECONNABORTED => {
            ErrnoAction::Close
        }
        libc::ETIMEDOUT | libc::EHOSTUNREACH | libc::ENETUNREACH | libc::ENETDOWN => {
            ErrnoAction::Close
        }
        libc::ENOTCONN | libc::ESHUTDOWN | libc::EADDRNOTAVAIL => ErrnoAction::Close,
        // Out of descriptors: the accept or socket fails, the connection in question is dropped.
        libc::EMFILE | libc::ENFILE => ErrnoAction::Close,
        // A bad descriptor or argument means the shard submitted a wrong SQE.
        libc::EBADF | libc::EINVAL | libc::EFAULT | libc::ENOTSOCK | libc::EOPNOTSUPP => {
            ErrnoAction::Bug
        }
        // Anything else: treat as a connection failure, never as a reason to stop the shard.
        _ => ErrnoAction::Close,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arms() {
        assert_eq!(classify(-libc::ECONNRESET), ErrnoAction::Close);
        assert_eq!(classify(-libc::ENOBUFS), ErrnoAction::Retry);
        assert_eq!(classify(-libc::ECANCELED), ErrnoAction::Cancelled);
        assert_eq!(classify(-libc::EBADF), ErrnoAction::Bug);
        assert_eq!(classify(-libc::EPIPE), ErrnoAction::Close);
    }
}
