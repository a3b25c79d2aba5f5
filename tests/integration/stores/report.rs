//! `voxlake bench --report` over a store, a rank at a time, and `voxlake report merge`: a rank
//! that reads through a slower route is flagged a straggler.

use std::process::Command;
use std::time::Duration;

use voxlake_testkit::{FaultPlan, FaultProxy, json_output, voxlake_bin};

use super::{Backend, remote_table};

/// Three ranks of one run; rank 2 reads through the fault proxy, 0.4 s a request. Each writes
/// its page; the merge lines them up and names rank 2, alone, the straggler: its exposed wait
/// (row groups and footers each 0.4 s late) is many times the others'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_that_reads_slower_is_flagged_a_straggler() {
    let backend = Backend::S3;
    let table = remote_table(backend, "report", 24, 43).await.table;
    let proxy = FaultProxy::start(
        backend.addr(),
        FaultPlan {
            latency: Duration::from_millis(400),
            ..FaultPlan::default()
        },
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options = super::options_file(backend, &proxy, &dir.path().join("options"));
    let pages = dir.path().join("pages");
    std::fs::create_dir(&pages).unwrap();
    let bench = |rank: usize, slow: bool| {
        let mut cmd = Command::new(voxlake_bin());
        cmd.args(["bench", &table, "--json", "--batch-size", "2"])
            .args(["--rank", &rank.to_string(), "--world-size", "3", "--report"])
            .arg(pages.join("run.html"));
        if slow {
            cmd.arg("--storage-option-file").arg(&options);
        } else {
            cmd.envs(backend.standard_env());
        }
        json_output(&mut cmd)
    };
    let printed: Vec<serde_json::Value> = (0..3).map(|rank| bench(rank, rank == 2)).collect();
    let merged = json_output(
        Command::new(voxlake_bin())
            .args(["report", "merge", "--json"])
            .arg(&pages),
    );
    assert_eq!(merged["stragglers"], serde_json::json!([2]), "{merged}");
    assert_eq!(merged["missing_ranks"], serde_json::json!([]));
    let waits: Vec<f64> = merged["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["consumer_wait_s"].as_f64().unwrap())
        .collect();
    for (rank, printed) in printed.iter().enumerate() {
        assert_eq!(printed["consumer_wait_s"].as_f64(), Some(waits[rank]));
    }
    assert!(
        waits[2] > 0.8,
        "two footers and a row group at least: {waits:?}"
    );
    // The merged page says so in words, and keeps what it found.
    let page = std::fs::read_to_string(pages.join("merged.html")).unwrap();
    assert!(
        page.contains("<p class=\"flag\">Straggler: rank 2 ("),
        "{page}"
    );
    // A page of another run in the folder is refused, naming both files.
    let other = pages.join("other.html");
    let page = std::fs::read_to_string(pages.join("run.rank0.html")).unwrap();
    assert!(page.contains("\"world_size\":3"));
    std::fs::write(&other, page.replace("\"world_size\":3", "\"world_size\":4")).unwrap();
    let out = Command::new(voxlake_bin())
        .args(["report", "merge"])
        .arg(&pages)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("other.html") && stderr.contains("their world_size differ (4 and 3)"),
        "{stderr}"
    );
}
