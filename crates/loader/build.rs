// With the `tch` feature: an rpath to libtorch (so tests and examples run without
// LD_LIBRARY_PATH) and libtorch_cuda linked with --no-as-needed: it is only reached through
// static initializers, so an as-needed link drops it and CUDA is never found, even on a GPU
// machine (tch-rs #980). torch-sys reports where libtorch is (links = "tch"). Also builds
// cuda/*.cpp (pinned host tensors, copies on a stream of their own: what tch does not expose)
// against libtorch's headers.
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        return;
    };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    // The facade includes this script for the link settings; the shim is the loader's.
    #[cfg(feature = "tch")]
    if std::env::var("CARGO_PKG_NAME").as_deref() == Ok("voxlake-loader") {
        pinned(Path::new(&dir));
    }
    if Path::new(&dir).join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-ltorch_cuda");
        println!("cargo:rustc-link-arg=-Wl,--as-needed");
    }
}

/// Compiles the shims (pinned host tensors; copies on a stream of their own) against the
/// headers beside libtorch's `lib` folder.
#[cfg(feature = "tch")]
fn pinned(lib: &Path) {
    println!("cargo:rerun-if-changed=cuda/pinned.cpp");
    println!("cargo:rerun-if-changed=cuda/copy.cpp");
    let root = lib.parent().unwrap_or(lib);
    cc::Build::new()
        .cpp(true)
        .file("cuda/pinned.cpp")
        .file("cuda/copy.cpp")
        .include(root.join("include"))
        .include(root.join("include/torch/csrc/api/include"))
        .flag("-std=c++17")
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .warnings(false)
        .compile("voxlake_cuda");
}
