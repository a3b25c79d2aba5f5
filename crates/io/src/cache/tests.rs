//! The cache under a remote store of its own (object_store's `InMemory`, counting reads):
//! hits and misses, one fetch for readers asking at once, corrupt and half-written entries,
//! other identities, eviction.

use std::sync::Arc;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use super::*;
use crate::remote::RemoteStore;

async fn remote(data: &[u8], tag: &str, cache: &Arc<DiskCache>) -> (RemoteStore, Path) {
    let inner = Arc::new(InMemory::new());
    let path = Path::from("part-0.parquet");
    inner.put(&path, data.to_vec().into()).await.unwrap();
    let store = RemoteStore::new(
        inner,
        "s3://bucket/table",
        Arc::new(vec![(path.clone(), data.len() as u64, tag.to_string())]),
    );
    store.set_cache(cache.clone());
    (store, path)
}

/// A read, and its entry written (the cache writes in the background).
async fn get(store: &RemoteStore, path: &Path, ranges: &[std::ops::Range<u64>]) -> Vec<Bytes> {
    let got = store.get_ranges(path, ranges).await.unwrap();
    if let Some(cache) = store.cache() {
        cache.flush().await;
    }
    got
}

fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

fn entries(cache: &DiskCache) -> Vec<std::path::PathBuf> {
    let mut names: Vec<_> = std::fs::read_dir(cache.dir().join("entries"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_second_read_is_a_hit_with_the_same_bytes_and_no_fetch() {
    let dir = tempfile::tempdir().unwrap();
    let cache = DiskCache::open(dir.path(), 1 << 30).unwrap();
    let bytes = data(3 << 20);
    let (store, path) = remote(&bytes, "etag=a", &cache).await;
    let ranges = [10..2_000_000, 2_500_000..3_000_000];
    let first = get(&store, &path, &ranges).await;
    let fetched = store.fetched();
    let second = get(&store, &path, &ranges).await;
    assert_eq!(first, second);
    assert_eq!(second[1], &bytes[2_500_000..3_000_000]);
    assert_eq!(store.fetched(), fetched, "nothing fetched on a hit");
    let s = cache.stats();
    assert_eq!((s.hits, s.misses), (1, 1));
    assert_eq!(s.bytes_read, 1_999_990 + 500_000);
    // Another process opening the folder finds it too.
    let again = DiskCache::open(dir.path(), 1 << 30).unwrap();
    let (other, _) = remote(&bytes, "etag=a", &again).await;
    assert_eq!(get(&other, &path, &ranges).await, first);
    assert_eq!(other.fetched(), 0);
}

/// On local disk a hit is a view of the entry's pages, not a copy (no read buffer is taken),
/// and what it views stays as it was when the entry is evicted or written again under it: the
/// argument for mapping entries (see the module's documentation).
#[tokio::test]
async fn a_hit_maps_its_entry_and_outlives_its_eviction_and_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let cache = DiskCache::open(dir.path(), 1 << 30).unwrap();
    assert!(cache.map, "a temporary folder is on local disk here");
    let bytes = data(3 << 20);
    let (store, path) = remote(&bytes, "etag=a", &cache).await;
    let ranges = [10..2_000_000, 2_500_000..3_000_000];
    get(&store, &path, &ranges).await;
    let hit = get(&store, &path, &ranges).await;
    assert_eq!(cache.stats().hits, 1);
    let [entry] = entries(&cache).try_into().unwrap();
    // Written again by another process (renamed over it), then evicted.
    let again = dir.path().join("again");
    std::fs::write(
        &again,
        vec![0xAA; std::fs::metadata(&entry).unwrap().len() as usize],
    )
    .unwrap();
    std::fs::rename(&again, &entry).unwrap();
    std::fs::remove_file(&entry).unwrap();
    assert_eq!(hit[0], &bytes[10..2_000_000]);
    assert_eq!(hit[1], &bytes[2_500_000..3_000_000]);
    drop(hit);
    assert_eq!(cache.pool.idle(), (0, 0), "no read buffer was used");
}

#[tokio::test]
async fn readers_asking_at_once_fetch_once() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = data(1 << 20);
    // Eight "processes" (caches of their own over one folder) and their stores.
    let mut stores = Vec::new();
    for _ in 0..8 {
        let cache = DiskCache::open(dir.path(), 1 << 30).unwrap();
        stores.push(remote(&bytes, "etag=a", &cache).await);
    }
    let reads = stores
        .iter()
        .map(|(store, path)| store.get_ranges(path, &[0..(1 << 20)]));
    for got in futures::future::join_all(reads).await {
        assert_eq!(got.unwrap()[0], &bytes[..]);
    }
    let fetched: u64 = stores.iter().map(|(s, _)| s.fetched()).sum();
    assert_eq!(fetched, 1 << 20, "one fetch for eight readers");
}

#[tokio::test]
async fn a_corrupt_entry_is_fetched_again_and_a_half_written_one_never_read() {
    let dir = tempfile::tempdir().unwrap();
    let cache = DiskCache::open(dir.path(), 1 << 30).unwrap();
    let bytes = Bytes::from(data(100_000));
    let (store, path) = remote(&bytes, "etag=a", &cache).await;
    get(&store, &path, &[0..100_000]).await;
    let [entry] = &entries(&cache)[..] else {
        panic!("one entry")
    };
    // A flipped bit in the payload.
    let mut on_disk = std::fs::read(entry).unwrap();
    let at = on_disk.len() - 5;
    on_disk[at] ^= 0x10;
    std::fs::write(entry, &on_disk).unwrap();
    let got = get(&store, &path, &[0..100_000]).await;
    assert_eq!(
        got[0],
        &bytes[..],
        "the store's bytes, not the corrupt ones"
    );
    assert_eq!(cache.stats().corrupt, 1);
    assert_eq!(store.fetched(), 200_000);
    // Rewritten whole: a hit again.
    get(&store, &path, &[0..100_000]).await;
    assert_eq!(store.fetched(), 200_000);
    // An entry cut short (a crash mid-write on a filesystem that reordered it) is not read.
    std::fs::write(entry, &on_disk[..on_disk.len() / 2]).unwrap();
    assert_eq!(get(&store, &path, &[0..100_000]).await[0], &bytes[..]);
    assert_eq!(cache.stats().corrupt, 2);
    // A writer killed before its rename leaves a temporary file, never read as an entry.
    std::fs::write(cache.dir().join("tmp").join("0123.999.1"), b"half").unwrap();
    get(&store, &path, &[0..100_000]).await;
    assert_eq!(cache.stats().corrupt, 2);
}

/// A mapped entry's checksum is computed once a process (its later hits map the same file), and
/// an entry written again under its name is another file: checked again, its corruption caught.
#[tokio::test]
async fn a_mapped_entry_is_checked_once_and_a_file_renamed_over_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let cache = DiskCache::open(dir.path(), 1 << 30).unwrap();
    let bytes = Bytes::from(data(2 << 20));
    let (store, path) = remote(&bytes, "etag=a", &cache).await;
    let ranges = [0..(2 << 20)];
    get(&store, &path, &ranges).await;
    let [entry] = entries(&cache).try_into().unwrap();
    let name = entry.file_name().unwrap().to_str().unwrap().to_string();
    let id = |p: &std::path::Path| verified::FileId::of(&std::fs::metadata(p).unwrap()).unwrap();
    assert!(
        !cache.verified.contains(&name, id(&entry)),
        "written, not yet read"
    );
    assert_eq!(get(&store, &path, &ranges).await[0], bytes);
    assert!(
        cache.verified.contains(&name, id(&entry)),
        "checked by its first hit"
    );
    // The same bytes with a flipped bit, written by another process and renamed over it.
    let mut on_disk = std::fs::read(&entry).unwrap();
    let at = on_disk.len() - 5;
    on_disk[at] ^= 0x10;
    let again = dir.path().join("again");
    std::fs::write(&again, &on_disk).unwrap();
    std::fs::rename(&again, &entry).unwrap();
    assert_eq!(
        get(&store, &path, &ranges).await[0],
        bytes,
        "the store's bytes"
    );
    assert_eq!(cache.stats().corrupt, 1);
    assert_eq!(store.fetched(), 2 * (2 << 20));
}

#[tokio::test]
async fn another_size_or_tag_is_another_entry() {
    let dir = tempfile::tempdir().unwrap();
    let cache = DiskCache::open(dir.path(), 1 << 30).unwrap();
    let (a, path) = remote(&data(1000), "etag=a", &cache).await;
    get(&a, &path, &[0..100]).await;
    // The same path rewritten with other bytes: a new e-tag.
    let other: Vec<u8> = vec![9; 1000];
    let (b, _) = remote(&other, "etag=b", &cache).await;
    assert_eq!(get(&b, &path, &[0..100]).await[0], &other[..100]);
    assert_eq!(b.fetched(), 100, "not the old bytes");
    let (c, _) = remote(&data(1001), "etag=a", &cache).await;
    get(&c, &path, &[0..100]).await;
    assert_eq!(c.fetched(), 100, "another size: fetched");
    assert_eq!(entries(&cache).len(), 3);
}

#[tokio::test]
async fn entries_past_the_cap_go_least_recently_used_first() {
    let dir = tempfile::tempdir().unwrap();
    // Room for about three entries of 100 kB.
    let cache = DiskCache::open(dir.path(), 350_000).unwrap();
    let bytes = data(1 << 20);
    let (store, path) = remote(&bytes, "etag=a", &cache).await;
    let range = |i: u64| [i * 100_000..(i + 1) * 100_000];
    for i in 0..3 {
        get(&store, &path, &range(i)).await;
        // Modification times an observable step apart.
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Entry 0 used again: entry 1 is now the least recently used.
    get(&store, &path, &range(0)).await;
    std::thread::sleep(std::time::Duration::from_millis(20));
    get(&store, &path, &range(3)).await;
    assert!(cache.used_bytes() <= 350_000, "{}", cache.used_bytes());
    assert!(cache.stats().evicted >= 1);
    let before = store.fetched();
    get(&store, &path, &range(0)).await;
    get(&store, &path, &range(3)).await;
    assert_eq!(store.fetched(), before, "the recently used stayed");
    get(&store, &path, &range(1)).await;
    assert_eq!(
        store.fetched(),
        before + 100_000,
        "the least recently used went"
    );
    // A read larger than the cap is served, not cached.
    get(&store, &path, &[0..400_000]).await;
    assert!(cache.used_bytes() <= 350_000);
}

#[test]
fn a_cache_that_cannot_be_used_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let e = DiskCache::open(&file, 1 << 20).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("cache {}: cannot create it", file.display())),
        "{e}"
    );
    let e = DiskCache::open(dir.path(), 0).unwrap_err().to_string();
    assert!(e.contains("a cap of 0 bytes"), "{e}");
}

#[test]
fn the_default_cap_counts_what_the_cache_already_holds() {
    // Half the free space alone would cap a cache opened again below what it holds (and evict
    // half of it at every open); with its entries counted, 64 MiB of entries move the cap by
    // about what they took from the free space.
    let dir = tempfile::tempdir().unwrap();
    let before = DiskCache::default_max_bytes(dir.path()).unwrap();
    let entries = dir.path().join(CACHE_SUBDIR).join("entries");
    std::fs::create_dir_all(&entries).unwrap();
    std::fs::write(entries.join("e"), vec![1u8; 64 << 20]).unwrap();
    let after = DiskCache::default_max_bytes(dir.path()).unwrap();
    assert!(
        before.abs_diff(after) < 16 << 20,
        "{before} then {after}: the entries were not counted"
    );
}

#[test]
fn a_shared_folder_is_never_touched_outside_the_caches_own() {
    use std::os::unix::fs::PermissionsExt;
    // Pointed at a folder holding other files (a home, a scratch folder): it works in its own
    // subfolder, 0700, and an hour-old file of someone else's is still there after a recount.
    let dir = tempfile::tempdir().unwrap();
    for sub in ["tmp", "locks"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        std::fs::write(dir.path().join(sub).join("notes.txt"), b"mine").unwrap();
    }
    let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
    assert_eq!(cache.dir(), dir.path().join(CACHE_SUBDIR));
    let mode = std::fs::metadata(cache.dir()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    // Names not of its own format, even old, stay: in its folders as in the one above.
    let old = std::time::SystemTime::now() - 2 * STALE;
    for sub in ["tmp", "locks"] {
        let foreign = cache.dir().join(sub).join("notes.txt");
        std::fs::write(&foreign, b"mine").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&foreign)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    cache.recount().unwrap();
    for sub in ["tmp", "locks"] {
        assert!(dir.path().join(sub).join("notes.txt").exists());
        assert!(cache.dir().join(sub).join("notes.txt").exists());
    }
    assert!(ours("tmp", "0123456789abcdef.12.34") && ours("locks", "0123456789abcdef.lock"));
    assert!(!ours("tmp", "notes.txt") && !ours("entries", "../x") && !ours("locks", "a.lock"));
}

#[test]
fn a_planted_link_or_a_folder_others_may_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    // Another user (or process) made the subfolder a link elsewhere: refused, nothing there
    // touched.
    let dir = tempfile::tempdir().unwrap();
    let victim = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(victim.path(), dir.path().join(CACHE_SUBDIR)).unwrap();
    let e = DiskCache::open(dir.path(), 1 << 20)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a folder (a symbolic link"), "{e}");
    assert_eq!(std::fs::read_dir(victim.path()).unwrap().count(), 0);
    // A subfolder anyone may write to: refused (an entry there could be anyone's).
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join(CACHE_SUBDIR);
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = DiskCache::open(dir.path(), 1 << 20)
        .unwrap_err()
        .to_string();
    assert!(e.contains("may be written by others (mode 777)"), "{e}");
    // Only readable by others: made private.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
    let mode = std::fs::metadata(cache.dir()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
}

#[tokio::test]
async fn planted_entries_and_locks_are_never_followed_or_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let cache = DiskCache::open(dir.path(), 1 << 30).unwrap();
    let bytes = Bytes::from(data(100_000));
    let (store, path) = remote(&bytes, "etag=a", &cache).await;
    get(&store, &path, &[0..100]).await;
    let entries: Vec<_> = std::fs::read_dir(cache.dir().join("entries"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1);
    let entry = &entries[0];
    // A FIFO in its place: read without blocking, refused, fetched from the store.
    std::fs::remove_file(entry).unwrap();
    let fifo = std::ffi::CString::new(entry.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let fetched = store.fetched();
    let got = tokio::time::timeout(Duration::from_secs(10), get(&store, &path, &[0..100]))
        .await
        .expect("a FIFO entry must not hang the read");
    assert_eq!(got[0], bytes.slice(0..100));
    assert_eq!(store.fetched(), fetched + 100);
    // A link to another file in its place: never followed (the target is not read or
    // replaced).
    let secret = dir.path().join("secret");
    std::fs::write(&secret, b"not an entry").unwrap();
    let _ = std::fs::remove_file(entry);
    std::os::unix::fs::symlink(&secret, entry).unwrap();
    let got = get(&store, &path, &[0..100]).await;
    assert_eq!(got[0], bytes.slice(0..100));
    assert_eq!(std::fs::read(&secret).unwrap(), b"not an entry");
}

#[tokio::test]
async fn another_users_cache_or_entry_is_never_used() {
    // Needs root to hand a folder to another user (`nobody`): as voxlake_testkit::as_nobody,
    // a run not as root fails unless VOXLAKE_SKIP_ROOT_TESTS says to skip it (scripts/test.sh
    // sets it, and says so, when not root).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(
            std::env::var_os("VOXLAKE_SKIP_ROOT_TESTS").is_some(),
            "this test needs root: run it as root, or set VOXLAKE_SKIP_ROOT_TESTS=1 to skip it knowingly"
        );
        return; // skipped knowingly: scripts/test.sh says so when it sets the variable
    }
    let nobody = 65534;
    let chown = |path: &std::path::Path| {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::chown(c.as_ptr(), nobody, nobody) }, 0);
    };
    // A cache folder another user made first (on a shared scratch disk): refused.
    let dir = tempfile::tempdir().unwrap();
    let theirs = dir.path().join(CACHE_SUBDIR);
    std::fs::create_dir(&theirs).unwrap();
    chown(&theirs);
    let e = DiskCache::open(dir.path(), 1 << 20)
        .unwrap_err()
        .to_string();
    assert!(e.contains("is owned by user 65534"), "{e}");
    // An entry of another user's in this user's cache: never trusted, fetched from the store.
    let dir = tempfile::tempdir().unwrap();
    let cache = DiskCache::open(dir.path(), 1 << 30).unwrap();
    let bytes = Bytes::from(data(10_000));
    let (store, path) = remote(&bytes, "etag=a", &cache).await;
    get(&store, &path, &[0..100]).await;
    let entry = entries(&cache).remove(0);
    chown(&entry);
    let fetched = store.fetched();
    assert_eq!(get(&store, &path, &[0..100]).await[0], bytes.slice(0..100));
    assert_eq!(store.fetched(), fetched + 100, "the foreign entry was used");
}

#[tokio::test]
async fn an_entry_made_is_made_once_a_node_and_made_again_when_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let made = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let make = |made: Arc<std::sync::atomic::AtomicUsize>| async move {
        made.fetch_add(1, Ordering::SeqCst);
        Ok(Bytes::from(data(70_000)))
    };
    // Eight "processes" asking at once make it once; a later one reads it.
    let mut asks = Vec::new();
    for _ in 0..8 {
        let cache = DiskCache::open(dir.path(), 1 << 30).unwrap();
        let made = made.clone();
        asks.push(tokio::spawn(async move {
            let got = cache.get_or_make("s3://b/t", "files@3", make(made)).await;
            cache.flush().await;
            got.unwrap()
        }));
    }
    for ask in asks {
        assert_eq!(ask.await.unwrap(), data(70_000));
    }
    assert_eq!(made.load(Ordering::SeqCst), 1);
    let cache = DiskCache::open(dir.path(), 1 << 30).unwrap();
    assert!(cache.has_made("s3://b/t", "files@3"));
    assert!(!cache.has_made("s3://b/t", "files@4"));
    let again = cache.get_or_make("s3://b/t", "files@3", make(made.clone()));
    assert_eq!(again.await.unwrap(), data(70_000));
    assert_eq!(made.load(Ordering::SeqCst), 1);
    assert_eq!(cache.stats().log_hits, 1);
    // Another name (version) is another entry.
    let other = cache.get_or_make("s3://b/t", "files@4", make(made.clone()));
    assert_eq!(other.await.unwrap(), data(70_000));
    cache.flush().await;
    assert_eq!(made.load(Ordering::SeqCst), 2);
    // A flipped byte: deleted, made again, never handed out.
    for path in entries(&cache) {
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, bytes).unwrap();
    }
    let fixed = cache.get_or_make("s3://b/t", "files@3", make(made.clone()));
    assert_eq!(fixed.await.unwrap(), data(70_000));
    assert_eq!(made.load(Ordering::SeqCst), 3);
    assert_eq!(cache.stats().corrupt, 1);
}
