//! Our franz-go client program (`tests/go`, github.com/twmb/franz-go), built once per test
//! process into `target/kmirror-tests-go/franz` with the Go toolchain; the modules come from
//! the Go module cache that `scripts/setup-deps.sh` fills (`go mod download`).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::{deps, proc};

const FIX: &str =
    "install Go >= 1.26 and run scripts/setup-deps.sh (it runs `go mod download` in tests/go)";

/// The built franz binary (built once per process; `go build` is incremental).
pub fn franz_bin() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let out = deps::target_dir().join("kmirror-tests-go").join("franz");
        let mut go = Command::new("go");
        go.args(["build", "-o"])
            .arg(&out)
            .arg(".")
            .current_dir(deps::workspace_root().join("tests/go"));
        match go.output() {
            Ok(o) if o.status.success() => {}
            Ok(o) => panic!(
                "go build in tests/go failed: {}: {FIX}",
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => panic!("`go` not runnable ({e}): {FIX}"),
        }
        out
    })
}

/// A `franz -mode MODE -bootstrap ADDR -topic TOPIC` command.
pub fn franz(mode: &str, bootstrap: &str, topic: &str) -> Command {
    let mut c = Command::new(franz_bin());
    c.args(["-mode", mode, "-bootstrap", bootstrap, "-topic", topic]);
    c
}

/// franz's JSON lines of one run.
#[derive(Debug, Default)]
pub struct FranzOut {
    /// `(offset, value)` of each acknowledged record.
    pub acks: Vec<(i64, String)>,
    /// `(offset, value)` of each consumed record.
    pub records: Vec<(i64, String)>,
    /// Next offsets committed for the group, per partition.
    pub committed: Vec<(i32, i64)>,
    /// "commit"/"abort" per ended transaction.
    pub txns: Vec<String>,
    /// The Kafka error name of a failure.
    pub error: Option<String>,
    /// Everything printed, for assertion messages.
    pub raw: String,
}

/// Runs a franz command (90 s budget) and parses its lines.
pub fn run(cmd: &mut Command) -> FranzOut {
    let ran = proc::run(cmd, Duration::from_secs(90));
    let mut out = FranzOut {
        raw: format!("{}\n{}", ran.stdout, proc::last_lines(&ran.stderr, 20)),
        ..FranzOut::default()
    };
    for line in ran.stdout.lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("franz printed a non-JSON line {line:?}: {e}"));
        let o = v["o"].as_i64().unwrap_or(-1);
        let val = v["v"].as_str().unwrap_or("").to_string();
        match v["ev"].as_str().unwrap_or("") {
            "ack" => out.acks.push((o, val)),
            "rec" => out.records.push((o, val)),
            "committed" => out
                .committed
                .push((v["p"].as_i64().unwrap_or(-1) as i32, o)),
            "commit" | "abort" => out.txns.push(v["ev"].as_str().unwrap().to_string()),
            "err" => out.error = Some(v["code"].as_str().unwrap_or("").to_string()),
            other => panic!("franz printed an unknown event {other:?}"),
        }
    }
    assert!(
        ran.status.success() || out.error.is_some(),
        "franz failed without an error line:\n{}",
        out.raw
    );
    out
}
