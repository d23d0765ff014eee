//! Cross-shard messages (`pgtier_engine::Command`): a bounded lock-free queue per shard plus
//! an eventfd the shard keeps a read armed on, so a post wakes the target ring without any
//! lock on the query path.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crossbeam_queue::ArrayQueue;

pub use pgtier_engine::{Command, PauseSignal, ShutdownMode};

pub struct Mailbox {
    queue: ArrayQueue<Command>,
    eventfd: OwnedFd,
}

impl Mailbox {
    pub fn new(capacity: usize) -> Result<Mailbox, String> {
        // SAFETY: plain syscall; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(format!("eventfd: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let eventfd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Mailbox {
            queue: ArrayQueue::new(capacity.max(16)),
            eventfd,
        })
    }

    pub fn eventfd(&self) -> RawFd {
        self.eventfd.as_raw_fd()
    }

    /// Queues `command` and wakes the shard; gives the command back if the queue is full.
    pub fn post(&self, command: Command) -> Result<(), Command> {
        self.queue.push(command)?;
        self.wake();
        Ok(())
    }

    /// Wakes the shard without a command (the control shard's admission replies arrive in a
    /// separate queue and ring the same eventfd).
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd; failure (counter
        // saturated) still leaves the shard awake, so the result is not needed.
        let _ = unsafe { libc::write(self.eventfd(), (&one as *const u64).cast(), 8) };
    }

    pub fn pop(&self) -> Option<Command> {
        self.queue.pop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn post_wakes_the_eventfd() {
        let mailbox = Mailbox::new(4).expect("eventfd");
        mailbox
            .post(Command::Cancel { pid: 1, secret: 2 })
            .expect("room");
        let mut value = 0u64;
        // SAFETY: reads 8 bytes into a live u64.
        let n = unsafe { libc::read(mailbox.eventfd(), (&mut value as *mut u64).cast(), 8) };
        assert_eq!(n, 8);
        assert_eq!(value, 1);
        assert!(matches!(
            mailbox.pop(),
            Some(Command::Cancel { pid: 1, secret: 2 })
        ));
        assert!(mailbox.pop().is_none());
    }
}
