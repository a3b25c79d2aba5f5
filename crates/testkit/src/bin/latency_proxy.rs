//! The testkit's fault and latency proxy as a program, for benches driven by scripts
//! (`benches/remote/run.sh`): forwards 127.0.0.1:PORT to an object store, holding every request
//! `--latency-ms` before it is forwarded and pacing each connection's response bodies to
//! `--mib-per-second`, until killed. Prints `listening on ADDR` once it accepts connections.

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
    /// Append each request to this file: milliseconds since start, method, target, range.
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
    println!("listening on {}", proxy.addr());
    let Some(path) = args.log else {
        std::future::pending::<()>().await;
        return Ok(());
    };
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut written = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let requests = proxy.requests();
        for r in &requests[written..] {
            writeln!(
                out,
                "{} {} {} {}",
                r.at.as_millis(),
                r.method,
                r.target,
                r.range.as_deref().unwrap_or("-")
            )?;
        }
        written = requests.len();
        out.flush()?;
    }
}
