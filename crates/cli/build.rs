// The binaries link libtorch when the `tch` feature is on: the same linker settings as the
// loader's.
include!("../loader/build.rs");
