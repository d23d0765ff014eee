//! pgtier's metrics: the Prometheus endpoint on `metrics_addr:metrics_port` (off while the
//! port is 0): one small thread of its own with a blocking listener that answers one scrape
//! at a time from shared state (`exposition.rs`), over the smallest HTTP a scraper needs
//! (`http.rs`). The shards' only part is what they already do: fold counters and, while the
//! endpoint is on, publish their pool gauges at housekeeping.

mod exposition;
mod http;

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing::{debug, info, warn};

use exposition::Format;
pub use exposition::Sources;
use http::Request;

/// The endpoint the settings ask for, and the server running it.
#[derive(Debug, Default)]
pub struct MetricsEndpoint {
    /// The address last asked for (`None`: `metrics_port = 0`).
    wanted: Option<(IpAddr, u16)>,
    server: Option<MetricsServer>,
}

impl MetricsEndpoint {
    /// Starts, moves or stops the server so it matches `metrics_addr`/`metrics_port`
    /// (nothing happens when they did not change).
    pub fn apply(
        &mut self,
        settings: &pgtier_core::config::Settings,
        sources: impl FnOnce() -> Sources,
    ) -> Result<(), String> {
        let wanted =
            (settings.metrics_port != 0).then_some((settings.metrics_addr, settings.metrics_port));
        if self.wanted == wanted {
            return Ok(());
        }
        self.stop();
        self.wanted = wanted;
        let Some((ip, port)) = wanted else {
            return Ok(());
        };
        self.server = MetricsServer::start(ip, port, sources())?;
        Ok(())
    }

    /// Where the server listens, while it runs.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(MetricsServer::local_addr)
    }

    /// Stops the server, if one runs.
    pub fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop();
            info!("metrics endpoint stopped");
        }
    }
}

/// A running metrics endpoint; stopped by [`MetricsServer::stop`] or on drop.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `ip:port` (`None` when the port is 0: no endpoint) and serves from its own
    /// thread.
    pub fn start(ip: IpAddr, port: u16, sources: Sources) -> Result<Option<Self>, String> {
        if port == 0 {
            return Ok(None);
        }
        let listener = TcpListener::bind(SocketAddr::new(ip, port))
            .map_err(|e| format!("cannot listen for metrics on {ip}:{port}: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("metrics listener: {e}"))?;
        let stopping = Arc::new(AtomicBool::new(false));
        let flag = stopping.clone();
        let thread = std::thread::Builder::new()
            .name("pgtier-metrics".to_string())
            .spawn(move || serve(listener, sources, &flag))
            .map_err(|e| format!("cannot start the metrics thread: {e}"))?;
        info!(%addr, "metrics endpoint listening (GET /metrics)");
        Ok(Some(MetricsServer {
            addr,
            stopping,
            thread: Some(thread),
        }))
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the thread (after the scrape it may be answering) and closes the listener.
    pub fn stop(mut self) {
        self.stop_thread();
    }

    fn stop_thread(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.stopping.store(true, Ordering::Release);
        // The thread blocks in accept: one connection of our own wakes it to see the flag.
        let wake = match self.addr.ip() {
            ip if ip.is_unspecified() && ip.is_ipv4() => {
                SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), self.addr.port())
            }
            ip if ip.is_unspecified() => {
                SocketAddr::new(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST), self.addr.port())
            }
            _ => self.addr,
        };
        if TcpStream::connect_timeout(&wake, Duration::from_secs(1)).is_err() {
            warn!("could not wake the metrics thread; it stops at its next connection");
            return;
        }
        let _ = thread.join();
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

fn serve(listener: TcpListener, sources: Sources, stopping: &AtomicBool) {
    let registry = exposition::registry(sources);
    for stream in listener.incoming() {
        if stopping.load(Ordering::Acquire) {
            return;
        }
        match stream {
            Ok(mut stream) => answer(&mut stream, &registry),
            Err(error) => {
                debug!(%error, "metrics accept failed");
                // EMFILE and the like: do not spin.
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn answer(stream: &mut TcpStream, registry: &prometheus_client::registry::Registry) {
    let outcome = match http::read_request(stream) {
        Request::Metrics { head, accept } => {
            let format = Format::from_accept(accept.as_deref());
            match exposition::encode(registry, format) {
                Ok(body) => http::respond(
                    stream,
                    "200 OK",
                    format.content_type(),
                    body.as_bytes(),
                    head,
                ),
                Err(_) => http::respond(
                    stream,
                    "500 Internal Server Error",
                    "text/plain; charset=utf-8",
                    b"the metrics could not be encoded\n",
                    false,
                ),
            }
        }
        Request::Refuse { status, reason } => {
            let body = format!("{reason}\n");
            http::respond(
                stream,
                status,
                "text/plain; charset=utf-8",
                body.as_bytes(),
                false,
            )
        }
    };
    if let Err(error) = outcome {
        debug!(%error, "metrics response not delivered");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgtier_replicas::RouterMap;
    use pgtier_replicas::SharedRouting;
    use std::io::{Read, Write};
    use std::net::Ipv4Addr;

    fn sources() -> Sources {
        Sources {
            engine: Arc::new(pgtier_engine::Shared::new(1)),
            routing: Arc::new(SharedRouting::new(RouterMap::default())),
        }
    }

    fn exchange(addr: SocketAddr, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let _ = stream.write_all(request);
        // Nothing more comes: an incomplete request ends here rather than at the timeout.
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response
    }

    fn free_port() -> u16 {
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .expect("a free port")
    }

    #[test]
    fn port_zero_is_no_endpoint() {
        let server = MetricsServer::start(IpAddr::V4(Ipv4Addr::LOCALHOST), 0, sources());
        assert!(matches!(server, Ok(None)));
    }

    #[test]
    fn serves_survives_bad_input_and_stops() {
        let server = MetricsServer::start(IpAddr::V4(Ipv4Addr::LOCALHOST), free_port(), sources())
            .expect("binds")
            .expect("an endpoint");
        let addr = server.local_addr();
        let ok = exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("\r\n\r\n# HELP pgtier_up"), "{ok}");
        for (request, status) in [
            (&b"\x00\x01\x02\r\n\r\n"[..], "400"),
            (b"GET /other HTTP/1.1\r\n\r\n", "404"),
            (b"GET /metrics HTTP/1.1\r\n", "400"),
        ] {
            let answer = exchange(addr, request);
            assert!(
                answer.starts_with(&format!("HTTP/1.1 {status}")),
                "{answer}"
            );
        }
        // A client that connects and leaves at once.
        drop(TcpStream::connect(addr).expect("connect"));
        let head = exchange(addr, b"HEAD /metrics HTTP/1.0\r\n\r\n");
        assert!(
            head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n"),
            "{head}"
        );
        server.stop();
        assert!(TcpStream::connect(addr).is_err(), "the listener is closed");
    }

    #[test]
    fn the_endpoint_follows_the_settings() {
        let mut endpoint = MetricsEndpoint::default();
        let mut settings = pgtier_core::config::Settings::default();
        endpoint.apply(&settings, sources).expect("off");
        assert_eq!(endpoint.local_addr(), None);
        settings.metrics_port = free_port();
        endpoint.apply(&settings, sources).expect("on");
        let first = endpoint.local_addr().expect("listening");
        endpoint.apply(&settings, sources).expect("unchanged");
        assert_eq!(endpoint.local_addr(), Some(first));
        settings.metrics_port = 0;
        endpoint.apply(&settings, sources).expect("off again");
        assert_eq!(endpoint.local_addr(), None);
        assert!(TcpStream::connect(first).is_err());
    }
}
