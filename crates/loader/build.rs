// With the `tch` feature: an rpath to libtorch (so tests and examples run without
// LD_LIBRARY_PATH) and libtorch_cuda linked with --no-as-needed: it is only reached through
// static initializers, so an as-needed link drops it and CUDA is never found, even on a GPU
// machine (tch-rs #980). torch-sys reports where libtorch is (links = "tch").
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        return;
    };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    if Path::new(&dir).join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-ltorch_cuda");
        println!("cargo:rustc-link-arg=-Wl,--as-needed");
    }
}
