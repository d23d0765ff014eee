//! A delaying TCP relay, standing in for `tc netem delay` (this kernel has no netem): it
//! listens in its own namespace and forwards each connection to one upstream server,
//! holding every chunk of bytes for the current delay in each direction before passing it
//! on. The delay is shared and can change while connections are open.
//!
//! What it emulates: a constant one-way latency on a link, in both directions, with bytes
//! kept in order. What it does not: reordering, jitter, loss, bandwidth limits, or delaying
//! the TCP handshake itself (the client's connect completes against the relay at once, and
//! the relay's own connect to the upstream is not delayed).

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::netns::{Host, Lab};

/// A running relay; stops accepting on drop (open connections end with their peers).
#[derive(Debug)]
pub struct Relay {
    delay_ms: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    listen: SocketAddr,
}

impl Relay {
    /// Listens on `listen` inside the relay host's namespace and forwards to `upstream`.
    pub fn start(lab: &Lab, listen: SocketAddr, upstream: SocketAddr) -> io::Result<Relay> {
        Relay::start_in(Some(lab.ns(Host::Relay)), listen, upstream)
    }

    /// As `start`, in the namespace called `ns`, or in the caller's own with `None`.
    pub fn start_in(
        ns: Option<String>,
        listen: SocketAddr,
        upstream: SocketAddr,
    ) -> io::Result<Relay> {
        let delay_ms = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let (delay, stopping) = (Arc::clone(&delay_ms), Arc::clone(&stop));
        std::thread::spawn(move || {
            let entered = match &ns {
                Some(ns) => super::netns::enter_named(ns),
                None => Ok(()),
            };
            let listener = entered
                .and_then(|()| TcpListener::bind(listen))
                .and_then(|l| l.set_nonblocking(true).map(|()| l));
            match listener {
                Ok(listener) => {
                    let _ = ready_tx.send(Ok(()));
                    accept_loop(&listener, upstream, &delay, &stopping);
                }
                Err(error) => {
                    let _ = ready_tx.send(Err(error));
                }
            }
        });
        ready_rx
            .recv_timeout(Duration::from_secs(5))
            .map_err(|_| io::Error::other("the relay did not start"))??;
        Ok(Relay {
            delay_ms,
            stop,
            listen,
        })
    }

    /// Sets the one-way delay applied from now on (0 = pass bytes at once).
    pub fn set_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.delay_ms.store(ms, Ordering::Relaxed);
    }

    pub fn listen(&self) -> SocketAddr {
        self.listen
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn accept_loop(
    listener: &TcpListener,
    upstream: SocketAddr,
    delay_ms: &Arc<AtomicU64>,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((client, _)) => {
                // Threads spawned here inherit this thread's namespace, so the upstream
                // connect happens inside the relay's namespace too.
                let delay = Arc::clone(delay_ms);
                std::thread::spawn(move || {
                    let _ = relay_connection(client, upstream, delay);
                });
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn relay_connection(
    client: TcpStream,
    upstream: SocketAddr,
    delay: Arc<AtomicU64>,
) -> io::Result<()> {
    client.set_nonblocking(false)?;
    let server = TcpStream::connect_timeout(&upstream, Duration::from_secs(10))?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (client_in, server_out) = (client.try_clone()?, server.try_clone()?);
    let to_server = Arc::clone(&delay);
    std::thread::spawn(move || pump(client_in, server_out, &to_server));
    pump(server, client, &delay);
    Ok(())
}

/// Copies `from` to `to`, each chunk released `delay` after it was read. A reader thread
/// timestamps chunks into a FIFO; this thread sends each when it is due, so order is kept.
fn pump(from: TcpStream, mut to: TcpStream, delay: &AtomicU64) {
    let (chunks_tx, chunks_rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let mut reader = match from.try_clone() {
        Ok(reader) => reader,
        Err(_) => return,
    };
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let due =
                            Instant::now() + Duration::from_millis(delay.load(Ordering::Relaxed));
                        if chunks_tx.send((due, buf[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                }
            }
            drop(chunks_tx);
        });
        for (due, chunk) in chunks_rx {
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            if to.write_all(&chunk).is_err() {
                let _ = from.shutdown(Shutdown::Both);
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream that echoes everything back.
    fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut stream = stream;
                    let mut reader = stream.try_clone().expect("clone");
                    let _ = io::copy(&mut reader, &mut stream);
                });
            }
        });
        addr
    }

    fn relay_to(upstream: SocketAddr) -> Relay {
        let port = crate::free_port().expect("port");
        Relay::start_in(None, SocketAddr::from(([127, 0, 0, 1], port)), upstream).expect("relay")
    }

    #[test]
    fn bytes_come_back_in_order() {
        let relay = relay_to(echo_server());
        let mut stream = TcpStream::connect(relay.listen()).expect("connect");
        let sent: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut writer = stream.try_clone().expect("clone");
        let copy = sent.clone();
        let writing = std::thread::spawn(move || writer.write_all(&copy));
        let mut received = vec![0u8; sent.len()];
        stream.read_exact(&mut received).expect("echo");
        writing.join().expect("writer").expect("write");
        assert!(received == sent, "bytes reordered or changed");
    }

    #[test]
    fn a_round_trip_takes_at_least_the_delay_each_way() {
        let relay = relay_to(echo_server());
        relay.set_delay(Duration::from_millis(100));
        let mut stream = TcpStream::connect(relay.listen()).expect("connect");
        let started = Instant::now();
        stream.write_all(b"ping").expect("write");
        let mut answer = [0u8; 4];
        stream.read_exact(&mut answer).expect("echo");
        // A lower bound only: a slow machine makes it longer, never shorter.
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(&answer, b"ping");
    }
}
