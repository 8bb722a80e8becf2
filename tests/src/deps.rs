//! Where the test dependencies are. Everything missing panics with the fix, never skips.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The workspace root (parent of this crate).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests crate has a parent dir")
        .to_path_buf()
}

/// The cargo target directory (honours CARGO_TARGET_DIR).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => {
            let d = PathBuf::from(d);
            if d.is_absolute() {
                d
            } else {
                workspace_root().join(d)
            }
        }
        None => workspace_root().join("target"),
    }
}

const FIX: &str = "run scripts/setup-deps.sh (it installs Java 17, Maven, the Kafka 4.1.1 jars, the Kafka 2.1.1 client, kcat and confluent-kafka)";

/// The Kafka 4.1.1 classpath that scripts/setup-deps.sh resolved.
pub fn kafka_classpath() -> &'static str {
    static CP: OnceLock<String> = OnceLock::new();
    CP.get_or_init(|| {
        let file = std::env::var_os("KMIRROR_KAFKA_CLASSPATH")
            .map(PathBuf::from)
            .unwrap_or_else(|| target_dir().join("kafka-classpath.txt"));
        let cp = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            panic!("Kafka classpath {} unreadable ({e}): {FIX}", file.display())
        });
        let cp = cp.trim().to_string();
        for jar in cp.split(':') {
            assert!(
                std::path::Path::new(jar).is_file(),
                "jar {jar} from {} is missing: {FIX}",
                file.display()
            );
        }
        assert!(
            cp.contains("kafka_2.13-4.1.1.jar") && cp.contains("kafka-tools-4.1.1.jar"),
            "{} lacks the Kafka 4.1.1 jars: {FIX}",
            file.display()
        );
        cp
    })
}

/// The quiet log4j2 config every JVM gets.
pub fn log4j_config() -> PathBuf {
    workspace_root().join("tests/java/log4j2-quiet.properties")
}

fn require_tool(name: &str, version_arg: &str) -> String {
    match Command::new(name).arg(version_arg).output() {
        Ok(out) if out.status.success() => name.to_string(),
        Ok(out) => panic!(
            "`{name} {version_arg}` failed: {}: {FIX}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!("`{name}` not runnable ({e}): {FIX}"),
    }
}

/// The `java` launcher (checked once).
pub fn java() -> &'static str {
    static J: OnceLock<String> = OnceLock::new();
    J.get_or_init(|| require_tool("java", "-version"))
}

/// The `javac` compiler (checked once).
pub fn javac() -> &'static str {
    static J: OnceLock<String> = OnceLock::new();
    J.get_or_init(|| require_tool("javac", "-version"))
}

/// `python3` with confluent-kafka importable (checked once).
pub fn python() -> &'static str {
    static P: OnceLock<String> = OnceLock::new();
    P.get_or_init(|| {
        let py = require_tool("python3", "--version");
        let out = Command::new(&py)
            .args(["-c", "import confluent_kafka"])
            .output()
            .expect("run python3");
        assert!(
            out.status.success(),
            "python3 cannot import confluent_kafka ({}): {FIX}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        py
    })
}

/// The cargo profile this test binary was built with (`target/<profile>/deps/<test>`), so the
/// kmirror binary is built the same way: `cargo test --profile ci` never triggers an LTO build.
pub fn build_profile() -> String {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .and_then(|d| d.file_name());
    match dir.and_then(|d| d.to_str()) {
        Some("debug") => "dev".to_string(),
        Some(p) if p != "deps" => p.to_string(),
        _ => "release".to_string(),
    }
}

/// The kmirror binary, freshly built with this test's profile once per test process (a stale
/// binary would make the tests judge old code). `KMIRROR_BIN` overrides.
pub fn kmirror_bin() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("KMIRROR_BIN") {
            let bin = PathBuf::from(bin);
            assert!(bin.is_file(), "KMIRROR_BIN={} is not a file", bin.display());
            return bin;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        let profile = build_profile();
        let mut build = Command::new(cargo);
        // `cargo test` runs this process with the test crate's CARGO_MANIFEST_DIR,
        // CARGO_PKG_* … set; build scripts that rerun when those change (ring's) would then
        // rebuild, and relink the binary, on every test process.
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if k.starts_with("CARGO_PKG_")
                || k.starts_with("CARGO_MANIFEST_")
                || k.starts_with("CARGO_CRATE_")
                || k.starts_with("CARGO_BIN_")
                || k == "CARGO_PRIMARY_PACKAGE"
                || k == "CARGO_TARGET_TMPDIR"
                || k == "OUT_DIR"
            {
                build.env_remove(k.as_ref());
            }
        }
        let status = build
            .args([
                "build",
                "--profile",
                &profile,
                "-p",
                "kmirror",
                "--bin",
                "kmirror",
            ])
            .current_dir(workspace_root())
            .status()
            .expect("run cargo build for the kmirror binary");
        assert!(
            status.success(),
            "cargo build --profile {profile} -p kmirror failed"
        );
        let dir = if profile == "dev" {
            "debug"
        } else {
            profile.as_str()
        };
        let bin = target_dir().join(dir).join("kmirror");
        assert!(bin.is_file(), "{} missing after build", bin.display());
        bin
    })
}

/// Debian's `kcat` (librdkafka 2.0.2 on bookworm), checked once.
pub fn kcat() -> &'static str {
    static K: OnceLock<String> = OnceLock::new();
    K.get_or_init(|| require_tool("kcat", "-V"))
}

/// The classpath of Apache Kafka's Java client 2.1.1 that scripts/setup-deps.sh resolved
/// (tests/java/old-client/pom.xml).
pub fn old_client_classpath() -> &'static str {
    static CP: OnceLock<String> = OnceLock::new();
    CP.get_or_init(|| {
        let file = target_dir().join("kafka-old-client-classpath.txt");
        let cp = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            panic!(
                "old client classpath {} unreadable ({e}): {FIX}",
                file.display()
            )
        });
        let cp = cp.trim().to_string();
        assert!(
            cp.contains("kafka-clients-2.1.1.jar")
                && cp.split(':').all(|j| std::path::Path::new(j).is_file()),
            "{} lacks kafka-clients 2.1.1 or a jar is missing: {FIX}",
            file.display()
        );
        cp
    })
}
