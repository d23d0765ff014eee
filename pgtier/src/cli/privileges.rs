//! `user` / `-u USER`: giving up root once the sockets are bound. As PgBouncer: started as
//! root, the process takes the user's group, its supplementary groups and then its uid
//! (setgid, initgroups, setuid, in that order, since each later one takes the right to do
//! the earlier); started as that user already, nothing changes; started as anyone else, the
//! start fails.

use std::ffi::CString;

/// A Unix user to switch to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunAs {
    pub name: String,
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
}

impl RunAs {
    /// Looks `name` up in the user database.
    pub fn lookup(name: &str) -> Result<RunAs, String> {
        let c_name = CString::new(name).map_err(|_| format!("user name {name:?} holds a NUL"))?;
        // SAFETY: `passwd` is plain data; all-zero is a valid value getpwnam_r overwrites.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut buf = vec![0 as libc::c_char; 16 * 1024];
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is to a live local; getpwnam_r writes only within `buf`.
        let rc = unsafe {
            libc::getpwnam_r(
                c_name.as_ptr(),
                &mut entry,
                buf.as_mut_ptr(),
                buf.len(),
                &mut found,
            )
        };
        if rc != 0 || found.is_null() {
            return Err(format!("user {name} does not exist"));
        }
        Ok(RunAs {
            name: name.to_string(),
            uid: entry.pw_uid,
            gid: entry.pw_gid,
        })
    }

    /// Whether switching changes anything (false when already running as this user).
    pub(crate) fn needs_switch(&self) -> bool {
        // SAFETY: getuid/geteuid take no arguments and cannot fail.
        let (uid, euid) = unsafe { (libc::getuid(), libc::geteuid()) };
        !(uid == self.uid && euid == self.uid)
    }

    /// Fails unless the switch can happen: started as root, or as this user already.
    pub(crate) fn check_allowed(&self) -> Result<(), String> {
        // SAFETY: geteuid takes no arguments and cannot fail.
        if self.needs_switch() && unsafe { libc::geteuid() } != 0 {
            return Err(format!(
                "cannot switch to user {}: pgtier was not started as root (or as that user)",
                self.name
            ));
        }
        Ok(())
    }

    /// Becomes this user. Must run before any other thread starts (the ids are per thread at
    /// the kernel level; glibc propagates them, but nothing should run meanwhile).
    pub fn switch(&self) -> Result<(), String> {
        if !self.needs_switch() {
            return Ok(());
        }
        self.check_allowed()?;
        let c_name = CString::new(self.name.as_str())
            .map_err(|_| format!("user name {:?} holds a NUL", self.name))?;
        let failed = |call: &str| {
            format!(
                "cannot switch to user {}: {call}: {}",
                self.name,
                std::io::Error::last_os_error()
            )
        };
        // SAFETY: plain id arguments and a live NUL-terminated name.
        unsafe {
            if libc::setgid(self.gid) != 0 {
                return Err(failed("setgid"));
            }
            if libc::initgroups(c_name.as_ptr(), self.gid) != 0 {
                return Err(failed("initgroups"));
            }
            if libc::setuid(self.uid) != 0 {
                return Err(failed("setuid"));
            }
            // setuid as root sets all three uids; check that root cannot be regained.
            if libc::setuid(0) == 0 {
                return Err(format!(
                    "cannot switch to user {}: root could be regained",
                    self.name
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_looked_up_and_unknown_ones_refused() {
        let root = RunAs::lookup("root").expect("root exists");
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(RunAs::lookup("no-such-user-pgtier").is_err());
    }
}
