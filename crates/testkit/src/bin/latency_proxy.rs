//! The testkit's fault and latency proxy as a program, for benches driven by scripts
//! (`benches/remote/run.sh`): forwards 127.0.0.1:PORT to an object store, holding every request
//! `--latency-ms` before it is forwarded and pacing each connection's response bodies to
//! `--mib-per-second`, until killed (SIGTERM: the log is written out first). Prints `listening on
//! ADDR` once it accepts connections.

use std::time::Duration;

use clap::Parser;
use voxlake_testkit::{FaultPlan, FaultProxy};

#[derive(Parser)]
struct Args {
    /// The store to forward to, e.g. 127.0.0.1:8333.
    upstream: std::net::SocketAddr,
    /// Added time to first byte, per request.
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// Response bodies paced to this rate per connection (a per-connection link).
    #[arg(long)]
    mib_per_second: Option<f64>,
    /// Append each request to this file once answered: when it arrived and when its answer was
    /// passed on (Unix milliseconds; `-`: cut by a fault or its client's exit), method,
    /// target, range.
    #[arg(long)]
    log: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let plan = FaultPlan {
        latency: Duration::from_millis(args.latency_ms),
        bytes_per_second: args.mib_per_second.map(|m| (m * 1048576.0) as u64),
        ..FaultPlan::default()
    };
    let proxy = FaultProxy::start(args.upstream, plan).await?;
    // The proxy's clock, started just now, as Unix time: a script compares it with its own.
    let epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    println!("listening on {}", proxy.addr());
    let Some(path) = args.log else {
        std::future::pending::<()>().await;
        return Ok(());
    };
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut written = 0;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        let last = tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => false,
            _ = term.recv() => true,
        };
        written = write_log(&mut out, &proxy.requests(), written, epoch, last)?;
        if last {
            return Ok(());
        }
    }
}

/// Writes `requests` from `from` on, in order of arrival, each once answered (all of them when
/// `last`: one cut by its client's exit shows `-`); returns how many are written.
fn write_log(
    out: &mut impl std::io::Write,
    requests: &[voxlake_testkit::Request],
    from: usize,
    epoch: Duration,
    last: bool,
) -> std::io::Result<usize> {
    let mut written = from;
    for r in &requests[from..] {
        if r.answered.is_none() && !last {
            break;
        }
        writeln!(
            out,
            "{} {} {} {} {}",
            (epoch + r.at).as_millis(),
            r.answered
                .map_or_else(|| "-".to_string(), |a| (epoch + a).as_millis().to_string()),
            r.method,
            r.target,
            r.range.as_deref().unwrap_or("-")
        )?;
        written += 1;
    }
    out.flush()?;
    Ok(written)
}
