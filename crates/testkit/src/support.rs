//! Helpers shared by the integration tests: tables read back with deltalake and parquet, the
//! synthetic cubes' bytes, the workspace's binaries, the project's Python. (No loader here: with
//! the `tch` feature it links libtorch, which only the loader's and the facade's binaries find.)
//! Test code: it panics on what a test must not meet.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use arrow::array::{Array, BinaryArray, Int64Array, StringArray};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use voxlake_compact::synth;

/// One row of a table as read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The label, if any.
    pub label: Option<i64>,
    /// The tensor's bytes.
    pub tensor: Vec<u8>,
}

/// Reads every row of the table at its latest version: id → row. Panics on a duplicate id.
pub async fn read_table(table: &Path) -> HashMap<String, Row> {
    let url = url_of(table);
    let t = deltalake::open_table(url).await.expect("table opens");
    let mut rows = HashMap::new();
    for uri in t.get_file_uris().expect("file uris") {
        let path = uri.strip_prefix("file://").unwrap_or(&uri).to_string();
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap())
            .unwrap()
            .build()
            .unwrap();
        for batch in reader {
            let batch = batch.unwrap();
            let ids = batch
                .column(0)
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap();
            let labels = batch
                .column(1)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            let tensors = batch
                .column(2)
                .as_any()
                .downcast_ref::<BinaryArray>()
                .unwrap();
            for i in 0..batch.num_rows() {
                let row = Row {
                    label: (!labels.is_null(i)).then(|| labels.value(i)),
                    tensor: tensors.value(i).to_vec(),
                };
                let previous = rows.insert(ids.value(i).to_string(), row);
                assert!(previous.is_none(), "id {} appears twice", ids.value(i));
            }
        }
    }
    rows
}

/// The `file://` URL of a folder.
pub fn url_of(dir: &Path) -> url::Url {
    url::Url::from_directory_path(dir).unwrap()
}

/// The f32 little-endian bytes of synthetic cube `index`.
pub fn cube_bytes(seed: u64, index: usize) -> (i64, Vec<u8>) {
    let (label, values) = synth::cube(seed, index as u64);
    (label, values.iter().flat_map(|v| v.to_le_bytes()).collect())
}

/// Asserts that the table holds exactly synthetic cubes `0..count` of `seed`, value for value.
pub async fn assert_table_holds_cubes(table: &Path, seed: u64, count: usize) {
    let rows = read_table(table).await;
    assert_eq!(rows.len(), count, "row count");
    for i in 0..count {
        let name = synth::cube_name(i);
        let row = rows.get(&name).unwrap_or_else(|| panic!("{name} missing"));
        let (label, bytes) = cube_bytes(seed, i);
        assert_eq!(row.label, Some(label), "{name} label");
        assert!(row.tensor == bytes, "{name} values differ");
    }
}

/// The number of committed versions in a local table's log.
pub fn commits(table: &Path) -> usize {
    std::fs::read_dir(table.join("_delta_log"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
                .count()
        })
        .unwrap_or(0)
}

/// The `compact` binary, built once if the test run did not build it.
pub fn compact_bin() -> PathBuf {
    workspace_bins().join("compact")
}

/// The `voxlake` binary (built like [`compact_bin`]).
pub fn voxlake_bin() -> PathBuf {
    workspace_bins().join("voxlake")
}

/// The folder of the workspace's binaries, built once per test run.
fn workspace_bins() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        // target/<profile>/deps/integration-… → target/<profile>/compact
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        // The same selection as scripts/test.sh's build, so the features (and artifacts) match
        // and this is a no-op there.
        build.args(["build", "--workspace", "--bins"]);
        // Not the variables cargo set for this test (CARGO_MANIFEST_DIR, CARGO_PKG_*, …): build
        // scripts that watch them (ring's does) would rerun, and the next outer build again.
        for (key, _) in std::env::vars() {
            if key.starts_with("CARGO_")
                && !matches!(key.as_str(), "CARGO_HOME" | "CARGO_TARGET_DIR")
            {
                build.env_remove(key);
            }
        }
        build.env_remove("OUT_DIR");
        if profile_dir.ends_with("release") {
            build.arg("--release");
        }
        let status = build.status().expect("cargo runs");
        assert!(status.success(), "building the workspace's binaries failed");
        for name in ["compact", "voxlake"] {
            let bin = profile_dir.join(name);
            assert!(bin.exists(), "{} missing", bin.display());
        }
        profile_dir
    })
    .clone()
}

/// The variable that lets a run of the tests not as root skip those where another local user
/// acts (`scripts/test.sh` sets it, and says so, when it does not run as root).
pub const SKIP_ROOT_TESTS: &str = "VOXLAKE_SKIP_ROOT_TESTS";

/// A command that runs `program` as user `nobody` (`setpriv`, uid and gid 65534, no groups).
/// Not root, the test fails, unless [`SKIP_ROOT_TESTS`] is set: then the reason, for the test
/// to skip with (never green without saying so). Root without `setpriv` fails: the set-up is
/// missing.
pub fn as_nobody(program: impl AsRef<std::ffi::OsStr>) -> Result<Command, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(
            std::env::var_os(SKIP_ROOT_TESTS).is_some(),
            "this test needs root (another local user acts through setpriv): run it as root, or set {SKIP_ROOT_TESTS}=1 to skip it knowingly"
        );
        // The caller says it skips; scripts/test.sh says why when it sets the variable.
        return Err(format!(
            "not root, {SKIP_ROOT_TESTS} set: cannot act as another user"
        ));
    }
    let found = Command::new("setpriv").arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "setpriv (util-linux) is missing: the tests where another user acts cannot run"
    );
    let mut command = Command::new("setpriv");
    command
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(program);
    Ok(command)
}

/// The project's Python with deltalake and pyarrow (scripts/test.sh installs it).
pub fn python() -> PathBuf {
    if let Ok(p) = std::env::var("VOXLAKE_PYTHON") {
        return PathBuf::from(p);
    }
    let local = checkout(".venv/bin/python");
    assert!(
        local.exists(),
        "no Python test environment: run scripts/test.sh (it installs .venv) or set VOXLAKE_PYTHON"
    );
    local
}

/// Runs a command that must succeed and returns its output; stderr is shown on failure.
pub fn succeeded(command: &mut Command) -> std::process::Output {
    let out = command.output().expect("the command runs");
    assert!(
        out.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs a command that must succeed and print one JSON document; stderr is shown on failure.
pub fn json_output(command: &mut Command) -> serde_json::Value {
    serde_json::from_slice(&succeeded(command).stdout).expect("JSON on stdout")
}

/// A path in this checkout. From the variable cargo sets when it runs the test, not the one
/// compiled in: a target directory shared by several checkouts (as `~/.cache/voxlake/target`
/// is) may hold a test binary built in another one.
pub fn checkout(relative: &str) -> PathBuf {
    // Compiled in, this crate's folder is crates/testkit: the workspace root is two up.
    let root = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."),
        PathBuf::from,
    );
    root.join(relative)
}

/// Runs `tests/python/<script>` with the project's Python; it must succeed. Its stdout, trimmed.
pub fn python_script<S: AsRef<std::ffi::OsStr>>(script: &str, args: &[S]) -> String {
    let out = Command::new(python())
        .arg(checkout(&format!("tests/python/{script}")))
        .args(args)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success(),
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The Parquet files in a local table's folder (not the log), sorted by name.
pub fn data_files(table: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(table)
        .expect("the table's folder")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    files.sort();
    files
}

/// Flips bit `mask` of one byte of `column`'s chunk in row group 0 of the Parquet `file`: the
/// byte at `at(start, len)` of the chunk's byte range (a corrupt value, its page intact).
pub fn flip_in_chunk(file: &Path, column: &str, at: impl Fn(u64, u64) -> u64, mask: u8) {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let reader = SerializedFileReader::new(std::fs::File::open(file).expect("the file"))
        .expect("a Parquet file");
    let chunk = reader
        .metadata()
        .row_group(0)
        .columns()
        .iter()
        .find(|c| c.column_path().string() == column)
        .expect("the column")
        .clone();
    let (start, len) = chunk.byte_range();
    let mut bytes = std::fs::read(file).expect("the file");
    bytes[at(start, len) as usize] ^= mask;
    std::fs::write(file, bytes).expect("the file written");
}

/// `compact demo --count COUNT --dir DIR`, which must succeed: DIR holds `cubes/`,
/// `labels.csv` and `table/`. Returns DIR.
pub fn compact_demo(dir: &Path, count: usize) -> PathBuf {
    let made = Command::new(compact_bin())
        .args(["demo", "--count", &count.to_string(), "--dir"])
        .arg(dir)
        .output()
        .expect("compact runs");
    assert!(
        made.status.success(),
        "compact demo failed: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    dir.to_path_buf()
}
