//! The sockets clients connect to: one `SO_REUSEPORT` TCP listener per shard and per
//! `listen_addr` address, and the Unix-domain socket `<unix_socket_dir>/.s.PGSQL.<port>`.
//!
//! **TCP.** Every shard has its own listener on each address, all in the port's
//! `SO_REUSEPORT` group, so the kernel spreads connections over the shards by hash and no
//! shard wakes for another's client. A second pgtier process binding the same port joins the
//! same group (same user), which is what a rolling restart uses. An IPv6 listener is
//! `IPV6_V6ONLY`, so `*` (0.0.0.0 and ::) binds both families side by side.
//!
//! **Unix.** A socket file has no `SO_REUSEPORT` group: there is one listening socket, and
//! every shard arms its multishot accept on its own duplicate of it. io_uring arms accept
//! polls as exclusive waits, so one connection wakes one shard (no thundering herd); which
//! shard is the kernel's choice, so Unix clients are not spread as evenly as TCP ones.
//! As PgBouncer does, a socket file left by a process that is gone (connecting is refused) is
//! replaced, and one a live process answers on is an error; the file is removed when the
//! [`UnixSocketFile`] guard drops at exit. A directory starting with `@` names a socket in
//! Linux's abstract namespace (no file, no mode, nothing to remove).

use std::ffi::CString;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use pgtier_core::config::Settings;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tracing::info;

/// Pending connections the kernel queues per listener.
const LISTEN_BACKLOG: i32 = 1024;

/// What a shard's listener accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerKind {
    Tcp,
    /// The Unix socket of `port` (clients on it are listed as `unix`, that port).
    Unix {
        port: u16,
    },
}

/// One listening socket a shard accepts on (it owns the fd and closes it at shutdown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardListener {
    pub fd: RawFd,
    pub kind: ListenerKind,
}

/// Every listening socket of the process, bound before any shard starts.
#[derive(Debug)]
pub struct Listeners {
    /// Per shard, its listeners (TCP addresses in `listen_addr` order, then the Unix socket).
    pub per_shard: Vec<Vec<ShardListener>>,
    /// The TCP addresses bound (the real port when `listen_port` was 0).
    pub tcp_addrs: Vec<SocketAddr>,
    /// The Unix socket, removed when this guard drops.
    pub unix: Option<UnixSocketFile>,
}

impl Listeners {
    /// Binds every TCP address for `shards` shards, then the Unix socket. On failure nothing
    /// stays bound (the caller may try again: `-R` waits for the process it takes over from
    /// to let its addresses go).
    pub fn bind(settings: &Settings, shards: usize) -> Result<Listeners, String> {
        Listeners::bind_taking_over(settings, shards, None)
    }

    /// [`Listeners::bind`] for `-R`: the Unix socket file of the process `predecessor`,
    /// which is finishing its transactions and keeps that socket open for its admin console
    /// meanwhile, is replaced by this process's (checked by the peer credentials of the
    /// process answering on it), so new clients reach this one at once.
    pub fn bind_taking_over(
        settings: &Settings,
        shards: usize,
        predecessor: Option<libc::pid_t>,
    ) -> Result<Listeners, String> {
        let shards = shards.max(1);
        let mut per_shard: Vec<Vec<ShardListener>> = vec![Vec::new(); shards];
        let mut tcp_addrs = Vec::new();
        let bound = Listeners::bind_into(settings, &mut per_shard, &mut tcp_addrs, predecessor);
        match bound {
            Ok(unix) => Ok(Listeners {
                per_shard,
                tcp_addrs,
                unix,
            }),
            Err(message) => {
                for listener in per_shard.iter().flatten() {
                    // SAFETY: these descriptors were opened by this call and handed to no
                    // one; each is closed once.
                    unsafe { libc::close(listener.fd) };
                }
                Err(message)
            }
        }
    }

    /// The binding steps of [`Listeners::bind`]: the TCP descriptors go into `per_shard` as
    /// they are made, so a failure later can close them.
    fn bind_into(
        settings: &Settings,
        per_shard: &mut [Vec<ShardListener>],
        tcp_addrs: &mut Vec<SocketAddr>,
        predecessor: Option<libc::pid_t>,
    ) -> Result<Option<UnixSocketFile>, String> {
        let shards = per_shard.len();
        // The Unix socket first when its name is known (a fixed port): once the TCP port
        // accepts, a client or a supervisor that saw it may use the socket file at once.
        let fixed_port = settings.listen_port;
        let mut unix = match unix_socket_dir(settings) {
            Some(dir) if fixed_port != 0 => Some(UnixSocketFile::bind(
                dir,
                fixed_port,
                settings,
                predecessor,
            )?),
            _ => None,
        };
        let mut port = fixed_port;
        for ip in settings.listen_addr.addrs() {
            let addr = SocketAddr::new(*ip, port);
            let (fds, bound) = bind_tcp(addr, shards)?;
            port = bound.port();
            tcp_addrs.push(bound);
            for (listeners, fd) in per_shard.iter_mut().zip(fds) {
                listeners.push(ShardListener {
                    fd,
                    kind: ListenerKind::Tcp,
                });
            }
        }
        if unix.is_none()
            && let Some(dir) = unix_socket_dir(settings)
        {
            // listen_port = 0: the socket is named after the port TCP picked.
            if port == 0 {
                return Err(
                    "listen_port = 0 picks a port only for a TCP address; the Unix socket needs \
                     a fixed listen_port"
                        .to_string(),
                );
            }
            unix = Some(UnixSocketFile::bind(dir, port, settings, predecessor)?);
        }
        if let Some(unix) = unix.as_mut() {
            let fds = unix.shard_fds(per_shard.len())?;
            for (listeners, fd) in per_shard.iter_mut().zip(fds) {
                listeners.push(ShardListener {
                    fd,
                    kind: ListenerKind::Unix { port },
                });
            }
        }
        if tcp_addrs.is_empty() && unix.is_none() {
            return Err(
                "nothing to listen on: listen_addr is empty and unix_socket_dir is not set"
                    .to_string(),
            );
        }
        Ok(unix)
    }

    /// The Unix socket file after the process switched to `uid`/`gid`: it must be able to
    /// remove the file at exit (in a sticky directory such as /tmp only its owner may).
    pub fn hand_to_user(&self, uid: libc::uid_t, gid: libc::gid_t) -> Result<(), String> {
        let Some(UnixSocketFile {
            file: Some(path), ..
        }) = &self.unix
        else {
            return Ok(());
        };
        let group_kept = self.unix.as_ref().is_some_and(|unix| unix.group_set);
        let gid = (!group_kept).then_some(gid);
        std::os::unix::fs::chown(path, Some(uid), gid)
            .map_err(|e| format!("cannot chown {}: {e}", path.display()))
    }
}

impl Listeners {
    /// A way for a thread other than the shards (the signal loop) to stop every TCP listener
    /// at once: duplicates of their descriptors, so the numbers stay this handle's whatever
    /// the shards close meanwhile.
    pub fn tcp_stops(&self) -> Result<TcpStops, String> {
        let mut fds = Vec::new();
        for listener in self.per_shard.iter().flatten() {
            if listener.kind != ListenerKind::Tcp {
                continue;
            }
            // SAFETY: `listener.fd` is open (the shards have not started); the duplicate is
            // owned by the handle returned.
            let fd = unsafe { libc::fcntl(listener.fd, libc::F_DUPFD_CLOEXEC, 0) };
            if fd < 0 {
                return Err(format!(
                    "cannot duplicate a listening socket: {}",
                    io::Error::last_os_error()
                ));
            }
            // SAFETY: `fd` was just returned by fcntl and is owned by nobody else.
            fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        Ok(TcpStops(fds))
    }
}

/// The process's TCP listeners, to take them out of their `SO_REUSEPORT` group the moment a
/// shutdown that would refuse a queued client begins (SIGQUIT, SIGINT), rather than when
/// each shard gets to it: until then a shard may still accept a connection only to refuse
/// it, where the kernel would give it to another process's listener (with
/// `tcp_migrate_req = 1`). A listening socket shut down for reading stops listening whoever
/// holds it; closing these duplicates alone would not (the shards hold theirs), so a shard
/// also shuts its listener down before closing it, and these never keep one listening.
#[derive(Debug)]
pub struct TcpStops(Vec<OwnedFd>);

impl TcpStops {
    /// Stops every TCP listener now (what each had queued goes to another listener of its
    /// group with `tcp_migrate_req = 1`, or is reset).
    pub fn stop_listening(&self) {
        for fd in &self.0 {
            stop_listening_fd(fd.as_raw_fd());
        }
    }
}

/// Takes the TCP listener `fd` out of its `SO_REUSEPORT` group now: a listening socket shut
/// down for reading runs Linux's close steps (its queue goes to another listener of the
/// group with `tcp_migrate_req = 1`, or is reset) whoever else holds the file (the ring, for
/// its accept). Once stopped, it stays so unless `listen` is called on it again.
pub fn stop_listening_fd(fd: RawFd) {
    // SAFETY: shutdown takes plain integers and only changes the socket's state; on a
    // socket already stopped it fails harmlessly (ENOTCONN).
    unsafe { libc::shutdown(fd, libc::SHUT_RD) };
}

/// Settings read once, when the process binds and starts, that differ between `started`
/// and `reloaded`: a reload does not rebind, reopen elsewhere or switch users again.
pub fn startup_only_changes(started: &Settings, reloaded: &Settings) -> Vec<&'static str> {
    let mut changed = Vec::new();
    let mut check = |name: &'static str, same: bool| {
        if !same {
            changed.push(name);
        }
    };
    check("listen_addr", started.listen_addr == reloaded.listen_addr);
    check("listen_port", started.listen_port == reloaded.listen_port);
    check(
        "unix_socket_dir",
        started.unix_socket_dir == reloaded.unix_socket_dir,
    );
    check(
        "unix_socket_mode",
        started.unix_socket_mode == reloaded.unix_socket_mode,
    );
    check(
        "unix_socket_group",
        started.unix_socket_group == reloaded.unix_socket_group,
    );
    check("logfile", started.logfile == reloaded.logfile);
    check("pidfile", started.pidfile == reloaded.pidfile);
    check("user", started.user == reloaded.user);
    check("syslog", started.syslog == reloaded.syslog);
    check(
        "syslog_ident",
        started.syslog_ident == reloaded.syslog_ident,
    );
    check(
        "syslog_facility",
        started.syslog_facility == reloaded.syslog_facility,
    );
    check("workers", started.workers == reloaded.workers);
    changed
}

/// The configured socket directory; an empty one means no Unix socket, as in PgBouncer.
fn unix_socket_dir(settings: &Settings) -> Option<&Path> {
    settings
        .unix_socket_dir
        .as_deref()
        .filter(|dir| !dir.as_os_str().is_empty())
}

/// `shards` listeners on `addr` in one SO_REUSEPORT group; the first picks the port when it
/// is 0 and the rest join it.
fn bind_tcp(mut addr: SocketAddr, shards: usize) -> Result<(Vec<RawFd>, SocketAddr), String> {
    let mut fds = Vec::with_capacity(shards);
    for _ in 0..shards {
        let socket = Socket::new(
            Domain::for_address(addr),
            Type::STREAM.cloexec(),
            Some(Protocol::TCP),
        )
        .map_err(|e| format!("cannot create the listening socket for {addr}: {e}"))?;
        socket
            .set_reuse_address(true)
            .map_err(|e| format!("SO_REUSEADDR: {e}"))?;
        socket
            .set_reuse_port(true)
            .map_err(|e| format!("SO_REUSEPORT: {e}"))?;
        if addr.is_ipv6() {
            // `::` would otherwise also take IPv4 and collide with a 0.0.0.0 listener.
            socket
                .set_only_v6(true)
                .map_err(|e| format!("IPV6_V6ONLY: {e}"))?;
        }
        socket
            .bind(&addr.into())
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        socket
            .listen(LISTEN_BACKLOG)
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        if addr.port() == 0
            && let Some(bound) = socket.local_addr().ok().and_then(|a| a.as_socket())
        {
            addr = bound;
        }
        fds.push(socket.into_raw_fd());
    }
    Ok((fds, addr))
}

/// The Unix socket's file; dropping it removes the file. It holds the listening socket only
/// until the shards take it (`shard_fds`): once the last shard closes its listener at
/// shutdown, a connect is refused at once (and a successor may replace the file) rather than
/// queued on a socket nobody accepts on.
#[derive(Debug)]
pub struct UnixSocketFile {
    socket: Option<Socket>,
    /// The file to remove at exit (`None` in the abstract namespace).
    file: Option<PathBuf>,
    /// What clients pass as `host` (the directory, or `@name`).
    shown: String,
    /// `unix_socket_group` was applied (the group is then kept when ownership changes).
    group_set: bool,
    /// (device, inode) of the file bound, so only that file is removed at exit.
    identity: Option<(u64, u64)>,
}

impl UnixSocketFile {
    fn bind(
        dir: &Path,
        port: u16,
        settings: &Settings,
        predecessor: Option<libc::pid_t>,
    ) -> Result<UnixSocketFile, String> {
        let name = format!(".s.PGSQL.{port}");
        let text = dir.to_string_lossy();
        if let Some(abstract_dir) = text.strip_prefix('@') {
            let name = Path::new(abstract_dir).join(&name);
            let addr = abstract_addr(name.as_os_str().as_encoded_bytes())?;
            let socket = unix_socket()?;
            socket
                .bind(&addr)
                .map_err(|e| format!("cannot listen on the abstract socket {text}: {e}"))?;
            socket
                .listen(LISTEN_BACKLOG)
                .map_err(|e| format!("cannot listen on the abstract socket {text}: {e}"))?;
            info!(socket = %text, "listening on a Unix socket (abstract namespace)");
            return Ok(UnixSocketFile {
                socket: Some(socket),
                file: None,
                shown: text.into_owned(),
                group_set: false,
                identity: None,
            });
        }
        let path = dir.join(&name);
        replace_stale(&path, predecessor)?;
        let addr = SockAddr::unix(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let socket = unix_socket()?;
        socket
            .bind(&addr)
            .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
        // From here the file is ours: the guard removes it on every way out.
        let mut guard = UnixSocketFile {
            socket: None,
            file: Some(path.clone()),
            shown: dir.display().to_string(),
            group_set: false,
            identity: file_identity(&path),
        };
        // Permissions are set before listen(): until then a connect is refused, so nobody
        // reaches the socket with the mode the umask gave it.
        std::fs::set_permissions(
            &path,
            std::fs::Permissions::from_mode(settings.unix_socket_mode & 0o7777),
        )
        .map_err(|e| format!("cannot chmod {}: {e}", path.display()))?;
        if let Some(group) = &settings.unix_socket_group {
            let gid = group_id(group)?;
            std::os::unix::fs::chown(&path, None, Some(gid))
                .map_err(|e| format!("cannot give {} to group {group}: {e}", path.display()))?;
            guard.group_set = true;
        }
        socket
            .listen(LISTEN_BACKLOG)
            .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
        guard.socket = Some(socket);
        info!(socket = %path.display(), "listening on a Unix socket");
        Ok(guard)
    }

    /// The socket file (`None` in the abstract namespace).
    pub fn path(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// What a client passes as `host` to reach it (`psql -h`).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// One descriptor of the listening socket per shard (duplicates, then the original);
    /// the guard keeps none.
    fn shard_fds(&mut self, shards: usize) -> Result<Vec<RawFd>, String> {
        let socket = self
            .socket
            .take()
            .ok_or("bug: the Unix listening socket was handed out already")?;
        let mut fds = Vec::with_capacity(shards);
        for _ in 1..shards {
            let copy = socket
                .try_clone()
                .map_err(|e| format!("cannot duplicate the Unix listening socket: {e}"))?;
            fds.push(copy.into_raw_fd());
        }
        fds.push(socket.into_raw_fd());
        Ok(fds)
    }
}

impl Drop for UnixSocketFile {
    fn drop(&mut self) {
        // A socket never handed to the shards (a later bind failed) is closed first, so the
        // check below finds the file unanswered and removes it.
        drop(self.socket.take());
        if let Some(path) = &self.file {
            // Only our own file: someone may have replaced it since (by hand, or a process
            // that found it unanswered while we were stopping, as `-R` does). The inode
            // alone does not tell: a successor's new socket file often gets the number of
            // the one it replaced. Ours, its listeners closed, refuses a connect; one a
            // successor serves accepts it.
            let ours = file_identity(path).is_some_and(|id| Some(id) == self.identity)
                && std::os::unix::net::UnixStream::connect(path).is_err();
            if ours {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// (device, inode) of the file at `path`.
fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|meta| (meta.dev(), meta.ino()))
}

fn unix_socket() -> Result<Socket, String> {
    Socket::new(Domain::UNIX, Type::STREAM.cloexec(), None)
        .map_err(|e| format!("cannot create the Unix listening socket: {e}"))
}

/// The abstract-namespace address `name` (Linux: a leading NUL instead of a file).
fn abstract_addr(name: &[u8]) -> Result<SockAddr, String> {
    use std::os::unix::ffi::OsStrExt;
    let mut bytes = Vec::with_capacity(name.len() + 1);
    bytes.push(0);
    bytes.extend_from_slice(name);
    SockAddr::unix(std::ffi::OsStr::from_bytes(&bytes))
        .map_err(|e| format!("abstract socket name: {e}"))
}

/// A socket file at `path` left by a process that is gone is removed, and so is one that
/// `predecessor` (the process `-R` takes over from) answers on; one another live process
/// answers on, or anything that is not a socket, is an error.
fn replace_stale(path: &Path, predecessor: Option<libc::pid_t>) -> Result<(), String> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("cannot inspect {}: {e}", path.display())),
    };
    if !meta.file_type().is_socket() {
        return Err(format!(
            "{} exists and is not a socket; remove it or change unix_socket_dir",
            path.display()
        ));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(stream)
            if predecessor.is_some()
                && crate::sockets::peer_credentials(stream.as_raw_fd())
                    .is_some_and(|(pid, _)| Some(pid) == predecessor) =>
        {
            info!(
                socket = %path.display(),
                "-R: replacing the socket file of the process taken over from"
            );
            remove_socket_file(path)
        }
        Ok(_) => Err(format!(
            "the Unix socket {} is in use by a running process (another pgtier or PgBouncer?); \
             each instance needs its own unix_socket_dir",
            path.display()
        )),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            info!(socket = %path.display(), "removing a stale Unix socket left by a process that is gone");
            remove_socket_file(path)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot check {}: {e}", path.display())),
    }
}

fn remove_socket_file(path: &Path) -> Result<(), String> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot remove the socket {}: {e}", path.display())),
    }
}

/// The gid of group `name`.
fn group_id(name: &str) -> Result<libc::gid_t, String> {
    if let Ok(gid) = name.parse::<libc::gid_t>() {
        return Ok(gid);
    }
    let c_name = CString::new(name).map_err(|_| format!("group name {name:?} holds a NUL"))?;
    let mut group: libc::group = unsafe_zeroed_group();
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is to a live local; getgrnam_r writes only within `buf`'s length.
    let rc = unsafe {
        libc::getgrnam_r(
            c_name.as_ptr(),
            &mut group,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() {
        return Err(format!("unix_socket_group: no group named {name}"));
    }
    Ok(group.gr_gid)
}

fn unsafe_zeroed_group() -> libc::group {
    // SAFETY: `group` is plain data (integers and pointers); all-zero is a valid value that
    // getgrnam_r overwrites.
    unsafe { std::mem::zeroed() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgtier_core::config::ListenAddrs;

    fn settings(listen_addr: &str, unix_dir: Option<&Path>) -> Settings {
        Settings {
            listen_addr: ListenAddrs::parse(listen_addr).expect("addresses"),
            listen_port: 0,
            unix_socket_dir: unix_dir.map(Path::to_path_buf),
            unix_socket_mode: 0o700,
            ..Settings::default()
        }
    }

    fn close_all(listeners: &Listeners) {
        for fd in listeners.per_shard.iter().flatten().map(|l| l.fd) {
            // SAFETY: the test owns these descriptors and uses none of them afterwards.
            unsafe { libc::close(fd) };
        }
    }

    #[test]
    fn settings_read_at_start_are_named_when_a_reload_changes_them() {
        let started = settings("127.0.0.1", None);
        assert!(startup_only_changes(&started, &started).is_empty());
        let mut reloaded = started.clone();
        reloaded.listen_addr = ListenAddrs::parse("127.0.0.2").expect("addr");
        reloaded.logfile = Some(PathBuf::from("/var/log/pgtier.log"));
        reloaded.default_pool_size += 1;
        assert_eq!(
            startup_only_changes(&started, &reloaded),
            vec!["listen_addr", "logfile"]
        );
    }

    #[test]
    fn every_address_gets_one_listener_per_shard_on_one_port() {
        let bound = match Listeners::bind(&settings("127.0.0.1,::1", None), 3) {
            Ok(bound) => bound,
            // No IPv6 loopback here (a container without it): the IPv4 part is tested below.
            Err(message) if message.contains("::1") => {
                Listeners::bind(&settings("127.0.0.1,127.0.0.2", None), 3).expect("bind")
            }
            Err(message) => panic!("{message}"),
        };
        assert_eq!(bound.per_shard.len(), 3);
        assert!(bound.per_shard.iter().all(|shard| shard.len() == 2));
        assert_eq!(bound.tcp_addrs.len(), 2);
        let port = bound.tcp_addrs[0].port();
        assert!(port != 0 && bound.tcp_addrs.iter().all(|a| a.port() == port));
        if bound.tcp_addrs[1].is_ipv6() {
            let fd = bound.per_shard[0][1].fd;
            // SAFETY: `fd` is open for this borrow.
            let socket = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            let v6only = socket2::SockRef::from(&socket)
                .only_v6()
                .expect("IPV6_V6ONLY");
            assert!(v6only, "an IPv6 listener leaves IPv4 to the 0.0.0.0 one");
        }
        close_all(&bound);
    }

    #[test]
    fn the_unix_socket_exists_before_tcp_and_goes_when_the_tcp_bind_fails() {
        let dir = std::env::temp_dir().join(format!("pgtier-listen-tcp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        // A port held without SO_REUSEPORT: pgtier's TCP bind of it fails.
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("hold a port");
        let port = taken.local_addr().expect("addr").port();
        let mut config = settings("127.0.0.1", Some(&dir));
        config.listen_port = port;
        let error = Listeners::bind(&config, 2).map(|bound| close_all(&bound));
        assert!(error.is_err(), "the port is taken");
        let path = dir.join(format!(".s.PGSQL.{port}"));
        assert!(!path.exists(), "the socket file bound first is removed");
        drop(taken);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_unix_socket_takes_its_mode_replaces_a_stale_file_and_refuses_a_live_one() {
        let dir = std::env::temp_dir().join(format!("pgtier-listen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let mut config = settings("", Some(&dir));
        config.listen_port = 39_999;
        let path = dir.join(".s.PGSQL.39999");
        let _ = std::fs::remove_file(&path);
        drop(std::os::unix::net::UnixListener::bind(&path).expect("stale socket"));
        let bound = Listeners::bind(&config, 2).expect("stale file replaced");
        assert!(bound.tcp_addrs.is_empty());
        assert!(bound.per_shard.iter().all(|shard| shard
            == &vec![ShardListener {
                kind: ListenerKind::Unix { port: 39_999 },
                ..shard[0]
            }]));
        let mode = std::fs::metadata(&path)
            .expect("socket")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        let again = Listeners::bind(&config, 1).expect_err("a live socket is refused");
        assert!(again.contains("in use"), "{again}");
        close_all(&bound);
        drop(bound);
        assert!(!path.exists(), "removed when the guard drops");
        std::fs::write(&path, "not a socket").expect("file");
        let refused = Listeners::bind(&config, 1).expect_err("a regular file is not replaced");
        assert!(refused.contains("not a socket"), "{refused}");
        let _ = std::fs::remove_dir_all(&dir);
        let nothing = Listeners::bind(&settings("", None), 1).expect_err("nothing to listen on");
        assert!(nothing.contains("nothing to listen on"), "{nothing}");
    }
}
