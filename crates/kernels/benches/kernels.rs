//! criterion benches of the copy kernels on the reference sample (30×30×10×10 f32, 360 KB),
//! throughput in stored bytes: a sample copied as it is (streamed into a batch, kept in the
//! caches for a transform), with its channels moved, with axes reversed (the first: long runs;
//! the last: runs of one value; every axis) and a normalization, into `f16`s, and a batch of 32
//! on a pool of two threads. Sources and destinations are cycled through sets larger than the
//! caches, as a loader's row groups and batches are.
//!
//! `cargo bench -p voxlake-kernels` (release).

use std::hint::black_box;
use std::mem::MaybeUninit;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use half::f16;
use voxlake_kernels::{Dest, fill_each, fill_flipped, fill_flipped_half, fill_sample};

const SHAPE: [usize; 4] = [30, 30, 10, 10];
const NUMEL: usize = 30 * 30 * 10 * 10;
/// Samples cycled through: 64 × 360 KB, past any last-level cache a sample's reads could hit.
const SOURCES: usize = 64;
const BATCH: usize = 32;

fn sources() -> Vec<Vec<u8>> {
    (0..SOURCES)
        .map(|s| {
            (0..NUMEL)
                .flat_map(|i| ((s * NUMEL + i) as f32 * 0.001).to_le_bytes())
                .collect()
        })
        .collect()
}

fn one_sample(c: &mut Criterion) {
    let sources = sources();
    let mut group = c.benchmark_group("sample");
    group.throughput(Throughput::Bytes((NUMEL * 4) as u64));
    let mut dsts = vec![vec![MaybeUninit::<f32>::uninit(); NUMEL]; SOURCES];
    let mut next = 0;
    // The next source and a destination other than the last few (out of the caches).
    let mut pair = move || {
        next = (next + 1) % SOURCES;
        (next, (next * 7) % SOURCES)
    };
    for (name, to) in [
        ("copy, into a batch", Dest::Batch),
        ("copy, kept near", Dest::Near),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let (s, d) = pair();
                fill_sample(&mut dsts[d], &sources[s], None, to)
            })
        });
    }
    group.bench_function("channels moved first", |b| {
        b.iter(|| {
            let (s, d) = pair();
            fill_sample(&mut dsts[d], &sources[s], Some(10), Dest::Batch)
        })
    });
    let flips: [(&str, [bool; 4]); 3] = [
        ("first axis", [true, false, false, false]),
        ("last axis", [false, false, false, true]),
        ("every axis", [true; 4]),
    ];
    for (name, reversed) in flips {
        group.bench_with_input(BenchmarkId::new("reversed", name), &reversed, |b, r| {
            b.iter(|| {
                let (s, d) = pair();
                fill_flipped(
                    &mut dsts[d],
                    &sources[s],
                    &SHAPE,
                    r,
                    |v: f32| v,
                    Dest::Batch,
                )
            })
        });
    }
    group.bench_function("first axis reversed, normalized", |b| {
        let (mean, std) = (black_box(0.5f32), black_box(2.0f32));
        b.iter(|| {
            let (s, d) = pair();
            let (r, f) = ([true, false, false, false], |v: f32| (v - mean) / std);
            fill_flipped(&mut dsts[d], &sources[s], &SHAPE, &r, f, Dest::Batch)
        })
    });
    let mut halves = vec![vec![MaybeUninit::<f16>::uninit(); NUMEL]; SOURCES];
    group.bench_function("into f16", |b| {
        b.iter(|| {
            let (s, d) = pair();
            fill_flipped_half(&mut halves[d], &sources[s], &SHAPE, &[false; 4], |v| v)
        })
    });
    group.finish();
}

fn batch(c: &mut Criterion) {
    let sources = sources();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("a pool of two threads");
    let mut group = c.benchmark_group("batch of 32");
    group.throughput(Throughput::Bytes((BATCH * NUMEL * 4) as u64));
    let mut dst = vec![MaybeUninit::<f32>::uninit(); BATCH * NUMEL];
    let mut first = 0;
    for (name, pool) in [("one thread", None), ("two threads", Some(&pool))] {
        group.bench_function(name, |b| {
            b.iter(|| {
                first = (first + BATCH) % SOURCES;
                fill_each::<f32, ()>(&mut dst, NUMEL, BATCH, pool, None, |i, out| {
                    fill_sample(out, &sources[(first + i) % SOURCES], None, Dest::Batch)
                })
                .expect("no check fails")
            })
        });
    }
    group.finish();
}

criterion_group!(kernels, one_sample, batch);
criterion_main!(kernels);
