//! `Lookup`: rows by position and id, value for value as the stream reads them (a filter's
//! rows too), and its errors: a position past the rows, an unknown id, a take the budget
//! cannot hold, a corrupt row.

use std::collections::HashMap;

use voxlake::loader::{Batch, Loader, Lookup};
use voxlake::plan::plan::SeededRng;
use voxlake_testkit::{cube_bytes, data_files};

use crate::loader::{collect, index_of, table_of};

/// Every row of `batch` is the cube its id names (seed `seed`), its label with it.
fn assert_cubes(batch: &Batch, seed: u64) {
    let values = batch.tensors.as_f32().unwrap();
    let values = values.as_slice().unwrap();
    let per = values.len() / batch.len();
    for (i, id) in batch.ids.iter().enumerate() {
        let (label, bytes) = cube_bytes(seed, index_of(id));
        let got: Vec<u8> = values[i * per..(i + 1) * per]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert!(got == bytes, "{id}: values differ");
        assert_eq!(batch.labels[i], Some(label), "{id}");
    }
}

/// The lookup's rows against the ids a plain (unshuffled) loader streams, in that order.
fn check_positions(lookup: &Lookup, order: &[String], seed: u64) {
    assert_eq!(lookup.len(), order.len() as u64);
    let mut rng = SeededRng::new(7);
    for size in [1usize, 2, 5, 17, order.len()] {
        let positions: Vec<u64> = (0..size).map(|_| rng.below(order.len()) as u64).collect();
        let batch = lookup.take(&positions).unwrap();
        let want: Vec<&str> = positions
            .iter()
            .map(|&p| order[p as usize].as_str())
            .collect();
        assert_eq!(batch.ids, want, "positions {positions:?}");
        assert_cubes(&batch, seed);
        // The same rows by their ids.
        let again = lookup.take_ids(&want).unwrap();
        assert_eq!(again.ids, batch.ids);
        assert_eq!(again.tensors, batch.tensors);
    }
    let index = lookup.ids().unwrap();
    let ids: Vec<&str> = index.ids().collect();
    assert_eq!(ids, order.iter().map(String::as_str).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_lookup_gives_each_row_as_the_stream_reads_it_filtered_or_not() {
    let dir = tempfile::tempdir().unwrap();
    // Row groups of 4 rows in files of about 3 row groups.
    let table = table_of(dir.path(), 30, 5, 4, 4_000_000).await;
    assert!(data_files(&table).len() > 2);
    let path = table.to_str().unwrap().to_string();
    tokio::task::spawn_blocking(move || {
        for filter in [None, Some("label = 1")] {
            let base = || {
                let b = Loader::builder(&path).with_batch_size(1);
                match filter {
                    Some(f) => b.with_filter(f),
                    None => b,
                }
            };
            let order: Vec<String> = collect(base()).into_iter().flat_map(|b| b.ids).collect();
            let lookup = base().build_lookup().unwrap();
            check_positions(&lookup, &order, 5);
            if filter.is_some() {
                assert!(order.len() < 30 && !order.is_empty());
            }
            let stats = lookup.stats();
            assert!(stats.samples > 0 && stats.stream.bytes > 0, "{stats:?}");
            lookup.close();
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_lookup_refuses_what_it_cannot_read_before_reading() {
    let dir = tempfile::tempdir().unwrap();
    let table = table_of(dir.path(), 12, 6, 4, 1 << 30).await;
    let path = table.to_str().unwrap().to_string();
    tokio::task::spawn_blocking(move || {
        let lookup = Loader::builder(&path).build_lookup().unwrap();
        let version = lookup.version();
        let e = lookup.take(&[3, 12]).unwrap_err().to_string();
        assert!(
            e.contains("12") && e.contains(&format!("version {version}")),
            "{e}"
        );
        let first = lookup.ids().unwrap().id(0).unwrap().to_string();
        let e = lookup
            .take_ids(&[&first, "no-such-id"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("'no-such-id'") && e.contains("version"), "{e}");
        assert!(lookup.take(&[]).is_err());
        assert_eq!(
            lookup.stats().stream.bytes,
            0,
            "nothing read for refused takes"
        );
        assert_eq!(lookup.positions(&[&first]).unwrap(), [0]);
        // A budget too small for the rows asked (each cube ~352 KiB).
        let small = Loader::builder(&path)
            .with_batch_size(1)
            .with_memory_budget(8 << 20)
            .build_lookup()
            .unwrap();
        let e = small
            .take(&(0..12).collect::<Vec<u64>>())
            .unwrap_err()
            .to_string();
        assert!(e.contains("take fewer rows"), "{e}");
        let one = small.take(&[0, 11]).unwrap();
        assert_eq!(one.len(), 2);
        // The streaming loader's own settings are refused.
        let mixed = Loader::builder(&path)
            .with_sampling(voxlake::plan::sample::Sampling::default().with_balance_labels())
            .build_lookup()
            .unwrap_err()
            .to_string();
        assert!(mixed.contains("weighted draws"), "{mixed}");
    })
    .await
    .unwrap();
}

/// A corrupt row: the lookup of it fails naming the checksum, every time; the other rows
/// of its row group and of the table are read whole.
#[tokio::test]
async fn a_corrupt_row_fails_its_lookup_alone() {
    let dir = tempfile::tempdir().unwrap();
    let table = table_of(dir.path(), 8, 21, 4, 1 << 30).await;
    let victim = data_files(&table).remove(0);
    voxlake_testkit::flip_in_chunk(&victim, "tensor", |start, len| start + len / 2, 0x10);
    let path = table.to_str().unwrap().to_string();
    tokio::task::spawn_blocking(move || {
        let lookup = Loader::builder(&path).build_lookup().unwrap();
        let mut failed: HashMap<u64, String> = HashMap::new();
        for p in 0..lookup.len() {
            match lookup.take(&[p]) {
                Ok(batch) => assert_cubes(&batch, 21),
                Err(e) => {
                    let again = lookup.take(&[p]).unwrap_err().to_string();
                    assert_eq!(e.to_string(), again, "a corrupt row fails every time");
                    failed.insert(p, again);
                }
            }
        }
        assert_eq!(failed.len(), 1, "{failed:?}");
        let e = failed.values().next().unwrap();
        assert!(e.contains("CRC-32") && e.contains("corrupt"), "{e}");
        // Taken with others, the batch fails.
        let bad = *failed.keys().next().unwrap();
        assert!(lookup.take(&[(bad + 1) % 8, bad]).is_err());
    })
    .await
    .unwrap();
}

/// One row of a row group: only its tensor's bytes are fetched (beside the row group's small
/// columns) in voxlake's layout; a compressed table's row group is read whole, the same values.
#[tokio::test]
async fn one_row_fetches_its_own_bytes_where_the_layout_allows() {
    use voxlake::compact::{Compactor, synth};
    use voxlake::format::{Codec, Layout};
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), 16, 9).unwrap();
    let mut tables = Vec::new();
    for codec in [Codec::None, Codec::Zstd] {
        let table = dir.path().join(format!("{codec:?}"));
        Compactor::new(table.to_str().unwrap())
            .with_labels(data.labels.to_str().unwrap())
            .with_layout(Layout {
                row_group_rows: 8,
                compression: codec,
                ..Layout::default()
            })
            .convert(data.cubes.to_str().unwrap())
            .await
            .unwrap();
        tables.push(table.to_str().unwrap().to_string());
    }
    tokio::task::spawn_blocking(move || {
        let sample = 30 * 30 * 10 * 10 * 4u64;
        let mut read = Vec::new();
        for table in &tables {
            let lookup = Loader::builder(table).build_lookup().unwrap();
            for p in [5u64, 12, 3] {
                let batch = lookup.take(&[p]).unwrap();
                assert_cubes(&batch, 9);
            }
            // Two rows of one row group and one of the other, in one take.
            let batch = lookup.take(&[9, 2, 4]).unwrap();
            assert_cubes(&batch, 9);
            read.push(lookup.stats().stream.bytes as f64 / (6 * sample) as f64);
        }
        assert!(
            read[0] < 1.1,
            "voxlake's layout: {:.2}× the samples' bytes",
            read[0]
        );
        assert!(
            read[1] > 2.0,
            "compressed, whole row groups: {:.2}×",
            read[1]
        );
    })
    .await
    .unwrap();
}

/// A split read by position: its rows alone, the streaming loader's split's rows, in the
/// version's order; an id of another split is not found.
#[tokio::test]
async fn a_split_is_its_rows_alone_numbered_in_the_versions_order() {
    use voxlake::plan::sample::Sampling;
    use voxlake::plan::split::Split;
    let dir = tempfile::tempdir().unwrap();
    let table = table_of(dir.path(), 40, 3, 4, 4_000_000).await;
    let path = table.to_str().unwrap().to_string();
    tokio::task::spawn_blocking(move || {
        let shares = vec![("train".to_string(), 0.7), ("val".to_string(), 0.3)];
        let val = Sampling::default().with_split(Split::new("val", shares.clone()));
        let streamed: Vec<String> = collect(Loader::builder(&path).with_sampling(val.clone()))
            .into_iter()
            .flat_map(|b| b.ids)
            .collect();
        let lookup = Loader::builder(&path)
            .with_sampling(val)
            .build_lookup()
            .unwrap();
        let all: Vec<String> = Loader::builder(&path)
            .build_lookup()
            .unwrap()
            .id_list()
            .unwrap();
        let ids = lookup.id_list().unwrap();
        assert_eq!(lookup.len(), ids.len() as u64);
        assert!(!ids.is_empty() && ids.len() < 40, "{}", ids.len());
        let mut sorted = streamed.clone();
        sorted.sort();
        let mut mine = ids.clone();
        mine.sort();
        assert_eq!(mine, sorted, "the stream's split");
        // The version's order: the split's ids as they stand among all.
        let in_order: Vec<&String> = all.iter().filter(|id| ids.contains(id)).collect();
        assert_eq!(in_order, ids.iter().collect::<Vec<_>>());
        let positions: Vec<u64> = (0..lookup.len()).rev().collect();
        let batch = lookup.take(&positions).unwrap();
        let want: Vec<&str> = positions
            .iter()
            .map(|&p| ids[p as usize].as_str())
            .collect();
        assert_eq!(batch.ids, want);
        assert_cubes(&batch, 3);
        assert_eq!(lookup.positions(&[ids[2].as_str()]).unwrap(), [2]);
        let train = all.iter().find(|id| !ids.contains(id)).unwrap();
        let e = lookup.take_ids(&[train.as_str()]).unwrap_err().to_string();
        assert!(e.contains(train.as_str()), "{e}");
        let e = lookup.take(&[lookup.len()]).unwrap_err().to_string();
        assert!(e.contains(&format!("{}", lookup.len())), "{e}");
    })
    .await
    .unwrap();
}
