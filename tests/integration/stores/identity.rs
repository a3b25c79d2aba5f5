//! Every Azure identity a team uses, end to end against Azurite in its OAuth mode (HTTPS, bearer
//! tokens only; scripts/azurite.sh starts it) with tokens from a Microsoft identity stand-in on
//! 127.0.0.1 (tests/python/token_server.py): managed identity (the IMDS endpoint), a service
//! principal (client secret), workload identity (a federated token file, as AKS mounts it) and
//! the Azure CLI (a stand-in `az` on PATH). Each reads the same table through `voxlake bench`,
//! with its settings in a `--storage-option-file`; the token log shows each used its own flow,
//! and tokens that expire within the epoch are fetched again without losing a row.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use voxlake_testkit::{compact_bin, voxlake_bin};

use super::{env, unique_prefix};

const TENANT: &str = "ab1f708d-50f6-404c-a006-d71b2ac7a606";

/// The token server, stopped when dropped.
struct Tokens {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Tokens {
    fn start(dir: &Path, name: &str, lifetime_s: u64) -> Tokens {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(voxlake_testkit::python())
            .arg(voxlake_testkit::checkout("tests/python/token_server.py"))
            .args([
                port.to_string(),
                log.display().to_string(),
                lifetime_s.to_string(),
            ])
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the token server did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Tokens { child, port, log }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The requests it answered, as JSON.
    fn requests(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Tokens {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Options reaching the OAuth Azurite, and `identity`'s own.
fn options_file(dir: &Path, name: &str, identity: &[(&str, String)]) -> PathBuf {
    let mut lines = vec![
        "azure_storage_account_name=devstoreaccount1".to_string(),
        format!(
            "azure_storage_endpoint={}/devstoreaccount1",
            env("VOXLAKE_AZURITE_OAUTH_URL")
        ),
        // The emulator's certificate is self-signed; the token stand-in speaks plain HTTP.
        "allow_invalid_certificates=true".to_string(),
        "allow_http=true".to_string(),
    ];
    lines.extend(identity.iter().map(|(k, v)| format!("{k}={v}")));
    let path = dir.join(format!("{name}.options"));
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// `voxlake bench TABLE --storage-option-file OPTIONS [ARGS]`: the ids it delivered.
fn bench_ids(table: &str, options: &Path, path_dir: Option<&Path>, args: &[&str]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let ids = dir.path().join("ids");
    let mut command = Command::new(voxlake_bin());
    command
        .args(["bench", table, "--storage-option-file"])
        .arg(options)
        .arg("--ids-out")
        .arg(&ids)
        .args(args);
    if let Some(extra) = path_dir {
        let path = std::env::var("PATH").unwrap_or_default();
        command.env("PATH", format!("{}:{path}", extra.display()));
    }
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(&ids)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn every_azure_identity_reads_a_table_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = Tokens::start(dir.path(), "tokens", 3600);
    let imds = format!("{}/metadata/identity/oauth2/token", tokens.url());
    // The table, converted through the managed identity.
    let demo = voxlake_testkit::compact_demo(&dir.path().join("demo"), 48);
    let table = format!("az://identity/{}", unique_prefix("identity"));
    let msi = options_file(dir.path(), "msi", &[("azure_msi_endpoint", imds.clone())]);
    let out = Command::new(compact_bin())
        .arg("convert")
        .arg(demo.join("cubes"))
        .arg(&table)
        .arg("--labels")
        .arg(demo.join("labels.csv"))
        .arg("--storage-option-file")
        .arg(&msi)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let every = |ids: Vec<String>, what: &str| {
        let unique: HashSet<&String> = ids.iter().collect();
        assert_eq!((ids.len(), unique.len()), (48, 48), "{what}");
    };
    let asked = |from: usize| tokens.requests()[from..].to_vec();

    // Managed identity: GET of the IMDS endpoint with `Metadata: true`.
    let before = tokens.requests().len();
    every(bench_ids(&table, &msi, None, &[]), "managed identity");
    assert!(
        asked(before)
            .iter()
            .any(|r| r["method"] == "GET" && r["metadata"] == "true"),
        "{:?}",
        asked(before)
    );

    // A service principal: client credentials with its secret.
    let authority = tokens.url();
    let principal = options_file(
        dir.path(),
        "principal",
        &[
            ("azure_client_id", "voxlake-test".into()),
            ("azure_client_secret", "principal-secret".into()),
            ("azure_tenant_id", TENANT.into()),
            ("azure_authority_host", authority.clone()),
        ],
    );
    let before = tokens.requests().len();
    every(
        bench_ids(&table, &principal, None, &[]),
        "service principal",
    );
    assert!(
        asked(before)
            .iter()
            .any(|r| r["grant_type"] == "client_credentials"
                && r["client_secret"] == "principal-secret"
                && r["path"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("/{TENANT}/oauth2"))),
        "{:?}",
        asked(before)
    );

    // Workload identity: the federated token AKS mounts, exchanged for an access token.
    let federated = dir.path().join("federated-token");
    std::fs::write(&federated, "eyJmZWRlcmF0ZWQiOnRydWV9.e30.c2ln").unwrap();
    let workload = options_file(
        dir.path(),
        "workload",
        &[
            ("azure_client_id", "voxlake-test".into()),
            ("azure_tenant_id", TENANT.into()),
            (
                "azure_federated_token_file",
                federated.display().to_string(),
            ),
            ("azure_authority_host", authority.clone()),
        ],
    );
    let before = tokens.requests().len();
    every(bench_ids(&table, &workload, None, &[]), "workload identity");
    assert!(
        asked(before)
            .iter()
            .any(|r| r["client_assertion"] == "eyJmZWRlcmF0ZWQiOnRydWV9.e30.c2ln"),
        "{:?}",
        asked(before)
    );

    // The Azure CLI: `az account get-access-token`, answered by a stand-in on PATH.
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let calls = dir.path().join("az-calls");
    let script = format!(
        "#!/bin/sh\necho \"$@\" >> '{}'\ntoken=$('{}' '{}' --token)\nexpires=$(date -d '+1 hour' '+%Y-%m-%d %H:%M:%S.000000')\nprintf '{{\"accessToken\": \"%s\", \"expiresOn\": \"%s\", \"tokenType\": \"Bearer\"}}' \"$token\" \"$expires\"\n",
        calls.display(),
        voxlake_testkit::python().display(),
        voxlake_testkit::checkout("tests/python/token_server.py").display(),
    );
    std::fs::write(bin.join("az"), script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("az"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cli = options_file(dir.path(), "cli", &[("azure_use_azure_cli", "true".into())]);
    every(bench_ids(&table, &cli, Some(&bin), &[]), "Azure CLI");
    let called = std::fs::read_to_string(&calls).unwrap();
    assert!(called.contains("account get-access-token"), "{called}");

    // Tokens that expire within the epoch: fetched again as they run out, no row lost.
    let short = Tokens::start(dir.path(), "short", 2);
    let expiring = options_file(
        dir.path(),
        "expiring",
        &[(
            "azure_msi_endpoint",
            format!("{}/metadata/identity/oauth2/token", short.url()),
        )],
    );
    let ids = bench_ids(&table, &expiring, None, &["--epochs", "3"]);
    assert_eq!(ids.len(), 3 * 48);
    assert!(short.requests().len() > 1, "{:?}", short.requests());
}
