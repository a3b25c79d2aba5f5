//! A fault and latency injector for tests and benches: an HTTP/1.1 proxy on 127.0.0.1 in front
//! of an object store emulator (Azurite, moto's S3 server), with real network delay, a bandwidth
//! limit per connection, HTTP 503 bursts, connections reset in the middle of a body, truncated
//! bodies and stalled responses, and a log of every request (method, path, `Range` header) for
//! request accounting.
//!
//! In process, object_store's `ThrottledStore` adds latency and a per-byte wait without a
//! network (it cannot wrap `LocalFileSystem`; wrap an `InMemory` copy).
//!
//! Faults hit data reads only (GETs with a `Range` header), on a deterministic schedule: the
//! n-th such request gets the fault whose period divides n, or, with [`RandomFaults`], the fault
//! a seeded generator draws for n (the same seed, the same faults). Listing, log and footer
//! handling stay untouched unless a period says otherwise.
//!
//! ```no_run
//! # async fn f() -> std::io::Result<()> {
//! use std::time::Duration;
//! use voxlake_testkit::{FaultPlan, FaultProxy};
//!
//! let proxy = FaultProxy::start(
//!     "127.0.0.1:10000".parse().unwrap(),
//!     FaultPlan { latency: Duration::from_millis(20), ..FaultPlan::default() },
//! )
//! .await?;
//! // Point AZURITE_BLOB_STORAGE_URL at format!("http://{}", proxy.addr()).
//! # Ok(()) }
//! ```

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

mod schedule;

use schedule::Fault;
pub use schedule::{FaultPlan, RandomFaults};

/// One request that passed through the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// HTTP method.
    pub method: String,
    /// Path and query.
    pub target: String,
    /// The `Range` header, if any.
    pub range: Option<String>,
    /// When it arrived, since the proxy started.
    pub at: Duration,
    /// When its whole answer was passed on, since the proxy started (`None`: not yet, or the
    /// answer was cut by a fault). A request asked after another's `answered` waited on it
    /// or could have: what `benches/scale` counts as sequential round trips.
    pub answered: Option<Duration>,
}

/// Counts of what the proxy did.
#[derive(Debug, Default)]
struct Counters {
    data_reads: AtomicU64,
    /// Every request, for plans whose faults hit every request kind.
    requests: AtomicU64,
    faults: AtomicU64,
    /// Whether the reply `FaultPlan::lose_reply` names was lost yet.
    lost_reply: std::sync::atomic::AtomicBool,
    /// When the outage began, as nanoseconds since the proxy started plus one (0: not yet).
    outage_from: AtomicU64,
}

/// A running proxy; it stops when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    log: Arc<Mutex<Vec<Request>>>,
    counters: Arc<Counters>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// Listens on an ephemeral port of 127.0.0.1 and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr, plan: FaultPlan) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let started = std::time::Instant::now();
        let addr = listener.local_addr()?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let counters = Arc::new(Counters::default());
        let plan = Arc::new(plan);
        let task = {
            let log = log.clone();
            let counters = counters.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let (log, counters, plan) = (log.clone(), counters.clone(), plan.clone());
                    tokio::spawn(async move {
                        if let Err(e) =
                            serve(client, upstream, &plan, &log, &counters, started).await
                        {
                            tracing::debug!(error = %e, "proxy connection ended");
                        }
                    });
                }
            })
        };
        Ok(FaultProxy {
            addr,
            log,
            counters,
            task,
        })
    }

    /// The address to point clients at.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request seen so far.
    pub fn requests(&self) -> Vec<Request> {
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Data reads (GETs with a `Range`) seen so far.
    pub fn data_reads(&self) -> u64 {
        self.counters.data_reads.load(Ordering::Relaxed)
    }

    /// Faults injected so far.
    pub fn faults(&self) -> u64 {
        self.counters.faults.load(Ordering::Relaxed)
    }
}

/// An HTTP/1.1 message head: start line and headers.
struct Head {
    start: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = format!("{}\r\n", self.start);
        for (k, v) in &self.headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        out.push_str("\r\n");
        out.into_bytes()
    }
}

async fn read_head<R: AsyncBufReadExt + Unpin>(r: &mut R) -> std::io::Result<Option<Head>> {
    let mut start = String::new();
    if r.read_line(&mut start).await? == 0 {
        return Ok(None);
    }
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    Ok(Some(Head {
        start: start.trim_end().to_string(),
        headers,
    }))
}

/// Reads a message body as framed by its head (`Content-Length` or chunked), raw.
async fn read_body<R: AsyncBufReadExt + Unpin>(
    r: &mut R,
    head: &Head,
    no_body: bool,
) -> std::io::Result<Vec<u8>> {
    if no_body {
        return Ok(Vec::new());
    }
    if head
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        let mut raw = Vec::new();
        loop {
            let mut size_line = String::new();
            r.read_line(&mut size_line).await?;
            raw.extend_from_slice(size_line.as_bytes());
            let size = usize::from_str_radix(size_line.trim().split(';').next().unwrap_or("0"), 16)
                .map_err(|_| std::io::Error::other("bad chunk size"))?;
            let mut chunk = vec![0; size + 2];
            r.read_exact(&mut chunk).await?;
            raw.extend_from_slice(&chunk);
            if size == 0 {
                return Ok(raw);
            }
        }
    }
    let len: usize = head
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).await?;
    Ok(body)
}

const COPY_BUFFER: usize = 1 << 20;

/// Copies `length` body bytes from the store to the client, paced to `bytes_per_second`.
async fn forward<R, W>(
    from: &mut R,
    to: &mut W,
    length: u64,
    bytes_per_second: Option<u64>,
) -> std::io::Result<()>
where
    R: AsyncBufReadExt + Unpin,
    W: AsyncWriteExt + Unpin,
{
    let start = tokio::time::Instant::now();
    // Paced bodies go out in slices of about 10 ms of the link, each once the link would have
    // finished carrying it.
    let slice = bytes_per_second.map_or(usize::MAX, |rate| (rate as usize / 100).max(16 << 10));
    let mut sent = 0u64;
    while sent < length {
        let chunk = from.fill_buf().await?;
        if chunk.is_empty() {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let n = chunk.len().min((length - sent) as usize).min(slice);
        if let Some(rate) = bytes_per_second.filter(|r| *r > 0) {
            let due = start + Duration::from_secs_f64((sent + n as u64) as f64 / rate as f64);
            tokio::time::sleep_until(due).await;
        }
        to.write_all(&chunk[..n]).await?;
        from.consume(n);
        sent += n as u64;
    }
    Ok(())
}

/// The request's target (path and query).
fn target_of(request: &Head) -> &str {
    request.start.split_whitespace().nth(1).unwrap_or("")
}

async fn serve(
    client: TcpStream,
    upstream: SocketAddr,
    plan: &FaultPlan,
    log: &Mutex<Vec<Request>>,
    counters: &Counters,
    started: std::time::Instant,
) -> std::io::Result<()> {
    // No Nagle: heads and bodies go out as separate writes, and Nagle's wait for the ACK of the
    // first (which the peer delays up to 40 ms) would add latency nobody asked for.
    client.set_nodelay(true)?;
    let (client_read, mut client_write) = client.into_split();
    let mut client_read = BufReader::new(client_read);
    let server = TcpStream::connect(upstream).await?;
    server.set_nodelay(true)?;
    let (server_read, mut server_write) = server.into_split();
    // Large buffers: the proxy shares the cores with the store and the loader under test, and
    // its copying cost should stay far below theirs (real latency costs no CPU).
    let mut server_read = BufReader::with_capacity(COPY_BUFFER, server_read);
    while let Some(mut request) = read_head(&mut client_read).await? {
        // A client that waits to be told to send its body (boto3's uploads) is told so here:
        // the body is read whole before the request goes on, without the header (the server's
        // own `100 Continue` would be taken for its answer).
        if request
            .header("expect")
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
        {
            request
                .headers
                .retain(|(k, _)| !k.eq_ignore_ascii_case("expect"));
            client_write
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await?;
        }
        let body = read_body(&mut client_read, &request, false).await?;
        let mut parts = request.start.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let target = parts.next().unwrap_or("").to_string();
        let range = request
            .header("range")
            .or(request.header("x-ms-range"))
            .map(str::to_string);
        let is_data_read = method == "GET" && range.is_some();
        let index = {
            let mut log = log.lock().expect("log lock");
            log.push(Request {
                method: method.clone(),
                target,
                range,
                at: started.elapsed(),
                answered: None,
            });
            log.len() - 1
        };
        let answered = || {
            if let Some(r) = log.lock().expect("log lock").get_mut(index) {
                r.answered = Some(started.elapsed());
            }
        };
        let n = counters.requests.fetch_add(1, Ordering::Relaxed) + 1;
        let fault = if is_data_read {
            let d = counters.data_reads.fetch_add(1, Ordering::Relaxed) + 1;
            plan.fault_for(if plan.every_request { n } else { d })
        } else if plan.every_request {
            plan.fault_for(n)
        } else {
            Fault::None
        };
        if !plan.latency.is_zero() {
            tokio::time::sleep(plan.latency).await;
        }
        // The store away: every request in the window, whatever its kind.
        let fault = match plan.outage {
            Some((after, length)) => {
                let now = started.elapsed().as_nanos() as u64 + 1;
                if is_data_read && counters.data_reads.load(Ordering::Relaxed) >= after {
                    let _ = counters.outage_from.compare_exchange(
                        0,
                        now,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                let from = counters.outage_from.load(Ordering::Relaxed);
                if from != 0 && now - from < length.as_nanos() as u64 {
                    Fault::Status("503 Service Unavailable")
                } else {
                    fault
                }
            }
            None => fault,
        };
        let lose = plan
            .lose_reply
            .as_ref()
            .is_some_and(|part| method == "PUT" && target_of(&request).contains(part.as_str()));
        let fault = if lose && !counters.lost_reply.swap(true, Ordering::Relaxed) {
            Fault::LoseReply
        } else {
            fault
        };
        if let Fault::Status(status) = fault {
            counters.faults.fetch_add(1, Ordering::Relaxed);
            client_write
                .write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").as_bytes())
                .await?;
            answered();
            continue;
        }
        server_write.write_all(&request.bytes()).await?;
        server_write.write_all(&body).await?;
        let response = read_head(&mut server_read)
            .await?
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
        let status: u16 = response
            .start
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let no_body = method == "HEAD" || status == 204 || status == 304;
        let length: Option<u64> = response
            .header("content-length")
            .and_then(|v| v.parse().ok());
        if let (Fault::None, Some(length), false) = (&fault, length, no_body) {
            // No fault to apply: stream the body through (store-and-forward would add a whole
            // transfer time to every request, not just the latency).
            client_write.write_all(&response.bytes()).await?;
            forward(
                &mut server_read,
                &mut client_write,
                length,
                plan.bytes_per_second,
            )
            .await?;
            answered();
            continue;
        }
        let response_body = read_body(&mut server_read, &response, no_body).await?;
        match fault {
            Fault::LoseReply => {
                counters.faults.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(target = target_of(&request), "reply lost");
                // An abortive close before any of the answer.
                let stream = client_write
                    .reunite(client_read.into_inner())
                    .map_err(std::io::Error::other)?;
                socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO))?;
                drop(stream);
                return Ok(());
            }
            Fault::Reset | Fault::Truncate if !response_body.is_empty() => {
                counters.faults.fetch_add(1, Ordering::Relaxed);
                let keep = if matches!(fault, Fault::Reset) {
                    response_body.len() / 2
                } else {
                    response_body
                        .len()
                        .saturating_sub(response_body.len().min(1000))
                };
                client_write.write_all(&response.bytes()).await?;
                client_write.write_all(&response_body[..keep]).await?;
                if matches!(fault, Fault::Reset) {
                    // An abortive close (RST, not FIN): the client sees a reset mid-body.
                    let stream = client_write
                        .reunite(client_read.into_inner())
                        .map_err(std::io::Error::other)?;
                    socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO))?;
                    drop(stream);
                } else {
                    client_write.shutdown().await?;
                }
                return Ok(());
            }
            Fault::Stall(d) => {
                counters.faults.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(d).await;
            }
            _ => {}
        }
        client_write.write_all(&response.bytes()).await?;
        client_write.write_all(&response_body).await?;
        answered();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_client_that_expects_100_continue_is_answered() {
        // An upstream that answers 200 to a request whose 5-byte body it read, and checks that
        // no `Expect` reached it.
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = upstream.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (socket, _) = upstream.accept().await.unwrap();
            let (read, mut write) = socket.into_split();
            let mut read = BufReader::new(read);
            let head = read_head(&mut read).await.unwrap().unwrap();
            assert!(head.header("expect").is_none(), "{:?}", head.headers);
            let body = read_body(&mut read, &head, false).await.unwrap();
            assert_eq!(body, b"hello");
            write
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await
                .unwrap();
        });
        let proxy = FaultProxy::start(addr, FaultPlan::default()).await.unwrap();
        let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
        client
            .write_all(
                b"PUT /b/k HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
            )
            .await
            .unwrap();
        // Told to go on before the body is sent (a hang here was the bug).
        let mut interim = [0u8; 25];
        tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut interim))
            .await
            .expect("no 100 Continue")
            .unwrap();
        assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
        client.write_all(b"hello").await.unwrap();
        let mut answer = Vec::new();
        let mut buf = [0u8; 64];
        while !answer.ends_with(b"ok") {
            let n = tokio::time::timeout(Duration::from_secs(5), client.read(&mut buf))
                .await
                .expect("no answer")
                .unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&answer));
            answer.extend_from_slice(&buf[..n]);
        }
        assert!(answer.starts_with(b"HTTP/1.1 200 OK"));
        server.await.unwrap();
    }

    #[test]
    fn error_bursts_follow_the_schedule() {
        let plan = FaultPlan {
            error_503_every: Some(5),
            error_500_every: Some(4),
            error_burst: 3,
            ..FaultPlan::default()
        };
        let schedule: Vec<&str> = (1..=12)
            .map(|n| match plan.fault_for(n) {
                Fault::Status(s) => &s[..3],
                _ => "-",
            })
            .collect();
        // 503 bursts start at 5 and 10 and win over the 500 bursts starting at 4 and 8.
        assert_eq!(
            schedule,
            [
                "-", "-", "-", "500", "503", "503", "503", "500", "500", "503", "503", "503"
            ]
        );
    }

    fn name(f: Fault) -> &'static str {
        match f {
            Fault::None => "-",
            Fault::Status(s) => &s[..3],
            Fault::Reset => "reset",
            Fault::Truncate => "cut",
            Fault::Stall(_) => "stall",
            Fault::LoseReply => "lost reply",
        }
    }

    #[test]
    fn random_faults_are_seeded_bursty_and_near_their_rate() {
        let plan = |seed| FaultPlan {
            random: Some(RandomFaults {
                seed,
                rate: 0.2,
                burst: 3,
                stall: Duration::from_millis(10),
            }),
            ..FaultPlan::default()
        };
        let run = |seed| -> Vec<&'static str> {
            (0..3000).map(|n| name(plan(seed).fault_for(n))).collect()
        };
        let a = run(1);
        assert_eq!(a, run(1), "the same seed, the same faults");
        assert_ne!(a, run(2));
        let faults = a.iter().filter(|f| **f != "-").count();
        assert!(
            (450..=750).contains(&faults),
            "{faults} faults in 3000 reads at 20 %"
        );
        for kind in ["503", "500", "reset", "cut", "stall"] {
            assert!(a.contains(&kind), "{kind} never drawn");
        }
        // Status errors fill whole windows of 3 reads.
        for w in a.chunks(3) {
            let statuses = w.iter().filter(|f| **f == "503" || **f == "500").count();
            assert!(statuses == 0 || statuses == 3, "{w:?}");
        }
    }
}
