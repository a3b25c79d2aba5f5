//! `voxlake`: tools around the loader; `voxlake bench TABLE` measures it.

mod args;
mod bench;
mod report;
mod series;

use std::ffi::OsString;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "voxlake",
    version,
    about = "Stream a voxlake Delta table into training loops"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the loader over TABLE, touch every value of every batch, and report throughput.
    Bench(Box<args::BenchArgs>),
    /// Tools for the pages `voxlake bench --report` writes.
    Report(args::ReportArgs),
}

/// Runs `voxlake report merge`: the merged page written, what it found printed.
fn merge(args: &args::MergeArgs, out: &mut impl std::io::Write) -> Result<(), bench::Error> {
    let found = report::merge(&args.dir, args.out.as_deref())?;
    if args.json {
        writeln!(out, "{found}")?;
        return Ok(());
    }
    for r in found["ranks"].as_array().into_iter().flatten() {
        writeln!(
            out,
            "rank {}: {:.0} samples/s, the loop waited {:.3} s inside next() ({:.1} % of its time){}",
            r["rank"],
            r["samples_per_s"].as_f64().unwrap_or(0.0),
            r["consumer_wait_s"].as_f64().unwrap_or(0.0),
            100.0 * r["input_bound_fraction"].as_f64().unwrap_or(0.0),
            if r["straggler"] == true {
                ": STRAGGLER"
            } else {
                ""
            },
        )?;
    }
    let stragglers = found["stragglers"].as_array().map_or(0, Vec::len);
    writeln!(
        out,
        "median wait {:.3} s; {stragglers} straggler(s) (waited over twice the median); missing ranks {}; pages that are no rank's {}; merged page {}",
        found["median_consumer_wait_s"].as_f64().unwrap_or(0.0),
        found["missing_ranks"],
        found["not_reports"],
        found["out"].as_str().unwrap_or("?"),
    )?;
    Ok(())
}

/// Runs `voxlake` with these arguments and returns the exit status: 0; 1 on an error (printed
/// to stderr as `error: …`); 2 on bad arguments (clap's message); 128 + the signal when
/// SIGINT or SIGTERM stopped `bench`, which still writes its state and ids (or, stopped while
/// the table opened, says so). `bench` handles those two signals itself from its start, and
/// looks for them every 50 ms while it waits.
pub fn voxlake<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    crate::compact::init_tracing();
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version are "errors" that print to stdout and exit 0.
            let _printed = e.print();
            return u8::try_from(e.exit_code()).unwrap_or(2);
        }
    };
    let result = match cli.command {
        Command::Bench(args) => bench::run(&args, &mut std::io::stdout().lock()),
        Command::Report(args) => match args.command {
            args::ReportCommand::Merge(m) => merge(&m, &mut std::io::stdout().lock()),
        },
    };
    match (result, bench::stopped_by()) {
        (Ok(()), None) => 0,
        // Stopped by a signal, with its state and ids written: the shell's 128 + signal.
        (Ok(()), Some(signal)) => {
            crate::compact::say(format_args!(
                "stopped by signal {signal}: the state and ids of every batch delivered are written"
            ));
            u8::try_from(128 + signal).unwrap_or(1)
        }
        // Stopped before there was anything to write (the table still opening).
        (Err(e), Some(signal)) => {
            crate::compact::say(format_args!("error: {e}"));
            u8::try_from(128 + signal).unwrap_or(1)
        }
        (Err(e), None) => {
            crate::compact::say(format_args!("error: {e}"));
            1
        }
    }
}
