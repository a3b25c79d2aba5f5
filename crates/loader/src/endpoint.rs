//! The metrics as a Prometheus text endpoint on 127.0.0.1
//! ([`LoaderBuilder::with_metrics_port`](crate::LoaderBuilder::with_metrics_port)), off by
//! default: `GET /metrics` answers the loader's [`Metric`]s as the loop last left them
//! (refreshed at most every [`REFRESH`] and at the run's end), `voxlake_` before each name.
//! A thread of its own (std only: nothing parks where a fork could inherit it) answers one
//! request at a time and ends with the loader.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{LoaderError, Metric, MetricValue};

/// How often the loop's metrics are rendered for the endpoint, at most.
pub(crate) const REFRESH: Duration = Duration::from_millis(100);
/// How often the idle server looks for a request or its end.
const POLL: Duration = Duration::from_millis(20);
/// A request's head, at most (a scraper's is a few hundred bytes).
const MOST_HEAD: usize = 8 << 10;

/// The endpoint a loader serves its metrics on.
pub(crate) struct Endpoint {
    text: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    address: SocketAddr,
    published: Option<Instant>,
}

impl Endpoint {
    /// Listens on 127.0.0.1:`port` (0: a port the system picks; see [`address`](Self::address)).
    pub(crate) fn bind(port: u16) -> Result<Endpoint, LoaderError> {
        let failed = |e: std::io::Error| {
            LoaderError::Config(format!(
                "the metrics endpoint on 127.0.0.1:{port} could not listen: {e}"
            ))
        };
        let listener = TcpListener::bind(("127.0.0.1", port)).map_err(failed)?;
        listener.set_nonblocking(true).map_err(failed)?;
        let address = listener.local_addr().map_err(failed)?;
        let text = Arc::new(Mutex::new(String::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (served, stopped) = (text.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("voxlake-metrics".into())
            .spawn(move || serve(&listener, &served, &stopped))
            .map_err(failed)?;
        Ok(Endpoint {
            text,
            stop,
            thread: Some(thread),
            address,
            published: None,
        })
    }

    /// Where it listens.
    pub(crate) fn address(&self) -> SocketAddr {
        self.address
    }

    /// Whether the metrics are due to be rendered again (`REFRESH` after the last time).
    pub(crate) fn due(&self) -> bool {
        self.published.is_none_or(|t| t.elapsed() >= REFRESH)
    }

    /// Serves `metrics` from now on.
    pub(crate) fn publish(&mut self, metrics: &[Metric]) {
        let text = render(metrics);
        *self.text.lock().unwrap_or_else(|e| e.into_inner()) = text;
        self.published = Some(Instant::now());
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("address", &self.address)
            .finish()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Dropped with the loader, which has no caller left to answer: a panic of the server
        // (the loader's batches were unaffected) is logged, naming the address.
        if let Some(Err(panic)) = self.thread.take().map(JoinHandle::join) {
            tracing::error!(
                address = %self.address,
                "the metrics endpoint panicked: {}",
                voxlake_io::panic_message(panic.as_ref())
            );
        }
    }
}

/// The metrics in Prometheus' text format (version 0.0.4).
pub(crate) fn render(metrics: &[Metric]) -> String {
    let mut out = String::new();
    for m in metrics {
        let kind = if m.grows { "counter" } else { "gauge" };
        let value = match m.value {
            MetricValue::Count(n) => n.to_string(),
            other => other.as_f64().to_string(),
        };
        let _ = write!(
            out,
            "# HELP voxlake_{name} {help}\n# TYPE voxlake_{name} {kind}\nvoxlake_{name} {value}\n",
            name = m.name,
            help = m.help,
        );
    }
    out
}

/// Answers requests until `stop`.
fn serve(listener: &TcpListener, text: &Mutex<String>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = answer(stream, text) {
                    tracing::debug!(error = %e, "a metrics request went unanswered");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(e) => {
                tracing::debug!(error = %e, "the metrics endpoint could not accept");
                std::thread::sleep(POLL);
            }
        }
    }
}

/// One request: `GET /metrics` is answered with the text, any other with 404.
fn answer(mut stream: TcpStream, text: &Mutex<String>) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MOST_HEAD {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let (status, body) = match line.strip_prefix(b"GET /metrics") {
        Some(rest) if rest.is_empty() || rest.starts_with(b" ") => (
            "200 OK",
            text.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        ),
        _ => ("404 Not Found", "GET /metrics\n".to_string()),
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LoaderStats;

    fn get(address: SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(address).unwrap();
        write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        stream.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn the_endpoint_serves_what_was_published_and_ends_with_its_owner() {
        let mut endpoint = Endpoint::bind(0).unwrap();
        let address = endpoint.address();
        assert!(endpoint.due());
        let reply = get(address, "/metrics");
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
        assert!(
            reply.ends_with("\r\n\r\n"),
            "nothing published yet: {reply}"
        );
        endpoint.publish(&LoaderStats::default().metrics());
        assert!(!endpoint.due());
        let reply = get(address, "/metrics");
        assert!(reply.contains("\r\n# HELP voxlake_samples samples handed out\n# TYPE voxlake_samples counter\nvoxlake_samples 0\n"), "{reply}");
        assert!(
            reply.contains("# TYPE voxlake_reads_in_flight gauge\n"),
            "{reply}"
        );
        assert!(get(address, "/").starts_with("HTTP/1.1 404 "));
        // The port is taken while it lives, and free once it is dropped.
        let taken = Endpoint::bind(address.port()).err().unwrap().to_string();
        assert!(
            taken.contains(&format!("127.0.0.1:{}", address.port())),
            "{taken}"
        );
        drop(endpoint);
        assert!(TcpStream::connect(address).is_err());
    }

    #[test]
    fn every_line_is_a_sample_or_its_help_and_type() {
        let text = render(&LoaderStats::default().metrics());
        for line in text.lines() {
            let ok = line.starts_with("# HELP voxlake_")
                || line.starts_with("# TYPE voxlake_")
                || (line.starts_with("voxlake_")
                    && line
                        .split(' ')
                        .nth(1)
                        .is_some_and(|v| v.parse::<f64>().is_ok()));
            assert!(ok, "{line}");
        }
    }
}
