//! For people with a GPU: checks that the loader's device batches and labels equal its CPU
//! batches bit for bit (every batch kept, so a staging buffer written over during its copy would
//! show), and prints host-to-device GB/s, the loader's samples/s on the device and how often a
//! staging buffer was still being copied when its turn came.
//! Without a GPU it says so and checks the CPU tensor path against the ndarray path instead.
//!
//! cargo run --release --features tch --example gpu_check -- TABLE

use std::time::Instant;

use voxlake::Loader;
use voxlake::loader::Tensors;
use voxlake::loader::tch::{Cuda, Device, Kind, Tensor};

fn batches(
    table: &str,
    device: Option<Device>,
) -> Result<(Vec<voxlake::Batch>, voxlake::loader::LoaderStats), Box<dyn std::error::Error>> {
    let mut b = Loader::builder(table.to_string())
        .with_batch_size(32)
        .with_shuffle(3, 256)
        .with_channels_first(true);
    if let Some(d) = device {
        b = b.with_device(d);
    }
    let mut loader = b.build()?;
    let batches = loader.by_ref().collect::<Result<Vec<_>, _>>()?;
    Ok((batches, loader.stats()))
}

fn as_cpu_tensor(t: &Tensors) -> Tensor {
    match t {
        Tensors::Tch(t) => t.0.to_device(Device::Cpu),
        Tensors::F32(a) => Tensor::from_slice(a.as_slice().expect("contiguous"))
            .reshape(a.shape().iter().map(|&d| d as i64).collect::<Vec<_>>()),
        other => panic!("this check expects f32 tables, got {:?}", other.dtype()),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let table = std::env::args().nth(1).ok_or("usage: gpu_check TABLE")?;
    let gpu = Cuda::is_available();
    let device = if gpu { Device::Cuda(0) } else { Device::Cpu };
    if !gpu {
        println!("no CUDA device: comparing the CPU tensor path with the ndarray path");
    }
    let (reference, _) = batches(&table, None)?;
    let start = Instant::now();
    let (on_device, stats) = batches(&table, Some(device))?;
    if gpu {
        Cuda::synchronize(0);
    }
    let seconds = start.elapsed().as_secs_f64();
    let samples: usize = on_device.iter().map(|b| b.len()).sum();
    assert_eq!(reference.len(), on_device.len(), "batch counts differ");
    for (i, (a, b)) in reference.iter().zip(&on_device).enumerate() {
        assert_eq!(a.ids, b.ids, "batch {i}: ids differ");
        let (x, y) = (as_cpu_tensor(&a.tensors), as_cpu_tensor(&b.tensors));
        assert!(
            x.size() == y.size() && x.equal(&y),
            "batch {i}: values differ"
        );
        if let Some(labels) = a.label_array() {
            let on = b
                .label_tensor(device)
                .ok_or("labels missing on the device")?;
            let back = Vec::<i64>::try_from(&on.to_device(Device::Cpu))?;
            assert_eq!(back, labels.to_vec(), "batch {i}: labels differ");
        }
    }
    println!(
        "{} batches equal bit for bit ({samples} samples)",
        on_device.len()
    );
    println!(
        "loader on {device:?}: {:.0} samples/s, staging buffers waited for {} times",
        samples as f64 / seconds,
        stats.staging_waits
    );
    if gpu {
        // Host-to-device bandwidth from pinned memory, for comparison with the loader.
        let host =
            Tensor::ones([256, 1 << 20], (Kind::Float, Device::Cpu)).pin_memory(Device::Cuda(0));
        let start = Instant::now();
        for _ in 0..10 {
            let _ = host.to_device_(Device::Cuda(0), Kind::Float, true, false);
        }
        Cuda::synchronize(0);
        let gb = 10.0 * 256.0 * 4.0 * (1 << 20) as f64 / 1e9;
        println!(
            "host → device: {:.1} GB/s",
            gb / start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
