//! How random the loader's order is with and without node affinity, measured on the pure
//! order the loader follows (`rewind`: the deal, the row-group shuffle, the shuffle buffer),
//! no data read. The numbers in `docs/scale-out.md` ("Node-affine shuffle") come from
//!
//! ```text
//! cargo run --release --example order_mix
//! ```
//!
//! A table of 2,000 files of 32 rows (one row group each) whose label comes in runs of 100
//! files (as a table written class by class), 16 ranks, batches of 32, a buffer of 1,024 rows;
//! the global shuffle against node affinity over 2 and 4 nodes. Per configuration: the rank
//! correlation of a row's place in the table with its place in the epoch, and of its place in
//! epoch 1 with its place in epoch 2 (places: delivery order, step by step, rank after rank);
//! the spread of a batch's share of label 1 (per rank, and over a global step of 16 batches)
//! against the binomial spread of a truly random batch; and the share of a node's epoch-2 rows
//! whose file it read in epoch 1 (what its cache can serve).

use voxlake::plan::affinity::Affinity;
use voxlake::plan::draws::Draws;
use voxlake::plan::order::EpochOrder;
use voxlake::plan::resume::{OrderSettings, rewind};

const FILES: usize = 2_000;
const ROWS: u64 = 32;
const WORLD: usize = 16;
const BATCH: usize = 32;

/// Every rank's rows of `epoch` in delivery order, as global table rows (file × ROWS + row).
fn epoch_rows(settings: &OrderSettings, epoch: u64) -> Vec<Vec<u64>> {
    let rows_per_file = vec![ROWS; FILES];
    let order: EpochOrder = settings.order(&rows_per_file, epoch);
    let all = Draws::full(order.total());
    (0..WORLD)
        .map(|rank| {
            let r = rewind(
                settings,
                &order,
                epoch,
                &[],
                &all,
                WORLD,
                rank,
                u64::MAX,
                |_| Ok::<_, ()>(vec![ROWS]),
            )
            .expect("pure");
            r.rows
                .iter()
                .map(|&(u, row)| {
                    let unit = &r.units[u];
                    unit.file as u64 * ROWS + unit.first_row + unit.drawn_row(row).expect("kept")
                })
                .collect()
        })
        .collect()
}

/// Spearman's rank correlation of two permutations given as `a[i]`, `b[i]` ranks.
fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len() as f64;
    let mean = (n - 1.0) / 2.0;
    let (mut cov, mut va, mut vb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        cov += (x - mean) * (y - mean);
        va += (x - mean).powi(2);
        vb += (y - mean).powi(2);
    }
    cov / (va * vb).sqrt()
}

/// Each table row's place in the epoch's delivery: step by step, rank after rank.
fn places(ranks: &[Vec<u64>]) -> Vec<f64> {
    let mut place = vec![0.0; FILES * ROWS as usize];
    let steps = ranks[0].len().div_ceil(BATCH);
    let mut at = 0.0;
    for step in 0..steps {
        for rows in ranks {
            for &row in rows.iter().skip(step * BATCH).take(BATCH) {
                place[row as usize] = at;
                at += 1.0;
            }
        }
    }
    place
}

fn label(row: u64) -> f64 {
    ((row / ROWS / 100) % 2) as f64
}

/// The standard deviation of label 1's share over batches of `rows`.
fn spread(batches: impl Iterator<Item = Vec<u64>>) -> f64 {
    let shares: Vec<f64> = batches
        .map(|b| b.iter().map(|&r| label(r)).sum::<f64>() / b.len() as f64)
        .collect();
    let mean = shares.iter().sum::<f64>() / shares.len() as f64;
    (shares.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / shares.len() as f64).sqrt()
}

fn main() {
    println!(
        "{FILES} files of {ROWS} rows, labels in runs of 100 files, {WORLD} ranks, batches of {BATCH}, buffer 1024 rows"
    );
    println!(
        "{:<22} {:>12} {:>14} {:>16} {:>18} {:>16}",
        "order", "ρ(table,ep)", "ρ(ep1,ep2)", "sd rank batch", "sd global step", "node reread"
    );
    let base = OrderSettings {
        batch_size: BATCH,
        ..OrderSettings::shuffled(7, 1024)
    };
    for (nodes, affine) in [(2usize, false), (2, true), (4, false), (4, true)] {
        let settings = OrderSettings {
            affinity: affine.then(|| Affinity::new(nodes, WORLD).expect("divides")),
            ..base
        };
        let (e1, e2) = (epoch_rows(&settings, 1), epoch_rows(&settings, 2));
        let table: Vec<f64> = (0..FILES as u64 * ROWS).map(|r| r as f64).collect();
        let (p1, p2) = (places(&e1), places(&e2));
        let rank_batches = e1
            .iter()
            .flat_map(|rows| rows.chunks(BATCH).map(<[u64]>::to_vec).collect::<Vec<_>>());
        let steps = e1[0].len().div_ceil(BATCH);
        let global = (0..steps).map(|s| {
            e1.iter()
                .flat_map(|rows| rows.iter().skip(s * BATCH).take(BATCH).copied())
                .collect::<Vec<_>>()
        });
        // Per node, the share of its epoch-2 rows whose row group (file) it read in epoch 1.
        let per_node = WORLD / nodes;
        let mut reread = 0.0;
        for node in 0..nodes {
            let ranks = node * per_node..(node + 1) * per_node;
            let read: std::collections::HashSet<u64> = e1[ranks.clone()]
                .iter()
                .flatten()
                .map(|r| r / ROWS)
                .collect();
            let next: Vec<u64> = e2[ranks].iter().flatten().map(|r| r / ROWS).collect();
            reread += next.iter().filter(|f| read.contains(f)).count() as f64 / next.len() as f64;
        }
        println!(
            "{:<22} {:>12.4} {:>14.4} {:>16.4} {:>18.4} {:>16.3}",
            if affine {
                format!("affinity, {nodes} nodes")
            } else {
                format!("global, {nodes} nodes")
            },
            spearman(&table, &p1),
            spearman(&p1, &p2),
            spread(rank_batches),
            spread(global),
            reread / nodes as f64
        );
    }
    println!(
        "binomial sd: rank batch {:.4}, global step {:.4}",
        (0.25 / BATCH as f64).sqrt(),
        (0.25 / (BATCH * WORLD) as f64).sqrt()
    );
}
