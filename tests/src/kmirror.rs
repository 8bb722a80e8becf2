//! A kmirror node: `kmirror serve --listen 127.0.0.1:PORT --data-dir DIR` (or `--listeners
//! PLAINTEXT://127.0.0.1:P1,SSL://127.0.0.1:P2,…` for a node with several listeners), started
//! from the freshly built release binary, ready once it prints its listening lines.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::deps;
use crate::proc::{self, ChildGuard};

/// A running (or stopped) kmirror node with a fixed address and data dir.
/// Dropping it kills the process and deletes the data dir.
#[derive(Debug)]
pub struct KmirrorNode {
    dir: tempfile::TempDir,
    port: u16,
    /// (listener name, port) when started with [`NodeBuilder::listeners`]; the first
    /// one's port is `port`. Empty: one PLAINTEXT listener via `--listen`.
    listeners: Vec<(String, u16)>,
    extra: Vec<String>,
    env: Vec<(String, String)>,
    /// A data dir chosen by the test (e.g. a size-limited tmpfs); None = `<temp dir>/data`.
    data: Option<PathBuf>,
    child: Option<ChildGuard>,
    starts: u32,
    /// The address it binds and advertises: 127.0.0.1, or its network namespace's address.
    host: String,
    /// The network namespace it runs in ([`NodeBuilder::netns`]).
    netns: Option<String>,
    /// Another kmirror binary than the build's ([`NodeBuilder::binary`]).
    bin: Option<PathBuf>,
}

/// How to start a [`KmirrorNode`]: extra `serve` arguments, environment, listeners, data dir,
/// network namespace. `KmirrorNode::builder().args(&["--cores", "1"]).start()`.
#[derive(Debug, Default, Clone)]
pub struct NodeBuilder {
    extra: Vec<String>,
    env: Vec<(String, String)>,
    protocols: Vec<String>,
    data: Option<PathBuf>,
    netns: Option<(String, String, u16)>,
    bin: Option<PathBuf>,
}

impl NodeBuilder {
    /// Runs `bin` instead of the build's kmirror (benchmarks comparing two builds).
    pub fn binary(mut self, bin: &Path) -> Self {
        self.bin = Some(bin.to_path_buf());
        self
    }

    /// Extra `serve` arguments (e.g. `["--cores", "1"]`), kept for restarts.
    pub fn args(mut self, extra: &[&str]) -> Self {
        self.extra.extend(extra.iter().map(|s| s.to_string()));
        self
    }

    /// Environment variables, kept for restarts until [`KmirrorNode::set_env`] changes them.
    pub fn env(mut self, env: &[(&str, &str)]) -> Self {
        self.env
            .extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        self
    }

    /// One listener per protocol name (e.g. `["PLAINTEXT", "SSL"]`), each on a loopback port
    /// of its own that restarts keep. [`KmirrorNode::addr`] is the first listener's address,
    /// [`KmirrorNode::listener_addr`] any one's. Without it: one PLAINTEXT `--listen`.
    pub fn listeners(mut self, protocols: &[&str]) -> Self {
        self.protocols = protocols.iter().map(|s| s.to_string()).collect();
        self
    }

    /// `--data-dir` is `data` (created if missing; the caller owns it and it is not deleted
    /// on drop). The log file stays in the node's own temp dir, so a data dir that fills up
    /// does not silence the node's log.
    pub fn data_dir(mut self, data: &Path) -> Self {
        self.data = Some(data.to_path_buf());
        self
    }

    /// Runs inside network namespace `ns` (see [`crate::netns::NetNs`]), listening on `host`
    /// (the namespace's address) at `port`. Restarts stay in the namespace.
    pub fn netns(mut self, ns: &str, host: &str, port: u16) -> Self {
        self.netns = Some((ns.to_string(), host.to_string(), port));
        self
    }

    /// Starts the node and waits until it listens.
    pub fn start(self) -> KmirrorNode {
        let dir = tempfile::Builder::new()
            .prefix("kmirror-node-")
            .tempdir()
            .expect("temp dir for kmirror");
        let listeners: Vec<(String, u16)> = self
            .protocols
            .into_iter()
            .map(|p| (p, proc::free_port()))
            .collect();
        let (host, port, netns) = match self.netns {
            Some((ns, host, port)) => (host, port, Some(ns)),
            None => (
                "127.0.0.1".to_string(),
                listeners
                    .first()
                    .map(|(_, p)| *p)
                    .unwrap_or_else(proc::free_port),
                None,
            ),
        };
        let mut node = KmirrorNode {
            dir,
            port,
            listeners,
            extra: self.extra,
            env: self.env,
            data: self.data,
            child: None,
            starts: 0,
            host,
            netns,
            bin: self.bin,
        };
        node.spawn();
        node
    }
}

impl KmirrorNode {
    /// Starts a node with default settings (`KmirrorNode::builder()` for anything else).
    pub fn start() -> Self {
        Self::builder().start()
    }

    /// How to start a node with other settings.
    pub fn builder() -> NodeBuilder {
        NodeBuilder::default()
    }

    /// Replaces the extra environment variables of the next start.
    pub fn set_env(&mut self, env: &[(&str, &str)]) {
        self.env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    }

    /// Replaces the extra `serve` arguments of the next start.
    pub fn set_extra(&mut self, extra: &[&str]) {
        self.extra = extra.iter().map(|s| s.to_string()).collect();
    }

    /// `127.0.0.1:PORT` (or the namespace address with [`NodeBuilder::netns`]).
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// `127.0.0.1:PORT` of the listener named `name` ("PLAINTEXT", "SSL", …); panics if the
    /// node has no such listener.
    pub fn listener_addr(&self, name: &str) -> String {
        if self.listeners.is_empty() && name == "PLAINTEXT" {
            return self.addr();
        }
        let (_, port) = self
            .listeners
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("kmirror node has no {name} listener"));
        format!("{}:{port}", self.host)
    }

    /// The data dir (kept across restarts).
    pub fn data_dir(&self) -> PathBuf {
        self.data
            .clone()
            .unwrap_or_else(|| self.dir.path().join("data"))
    }

    /// The node's combined stdout/stderr log of the current and earlier runs.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("kmirror.log")
    }

    fn spawn(&mut self) {
        assert!(self.child.is_none(), "kmirror already running");
        let bin = self
            .bin
            .clone()
            .unwrap_or_else(|| deps::kmirror_bin().clone());
        let bin = &bin;
        self.starts += 1;
        let addr = self.addr();
        let mut log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open kmirror log");
        writeln!(log, "==== start #{} ====", self.starts).ok();
        let listen_args: Vec<String> = if self.listeners.is_empty() {
            vec!["--listen".into(), addr.clone()]
        } else {
            let list: Vec<String> = self
                .listeners
                .iter()
                .map(|(n, p)| format!("{n}://{}:{p}", self.host))
                .collect();
            vec!["--listeners".into(), list.join(",")]
        };
        // `kmirror listening on ADDR` comes first, then `kmirror listener NAME on ADDR` per
        // listener: ready at the last listener's line (or the first line without listeners).
        let ready_marker = self
            .listeners
            .last()
            .map(|(n, _)| format!("kmirror listener {n} on"));
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let mut child = cmd
            .arg("serve")
            .args(&listen_args)
            .arg("--data-dir")
            .arg(self.data_dir())
            .args(&self.extra)
            .env("RUST_BACKTRACE", "1")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log.try_clone().expect("dup log"))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel::<()>();
        let port = self.port.to_string();
        // Copies stdout to the log and signals the first line that announces the listener.
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                writeln!(log, "{line}").ok();
                let ready = match &ready_marker {
                    Some(m) => line.contains(m.as_str()),
                    None => line.to_ascii_lowercase().contains("listening") || line.contains(&port),
                };
                if ready {
                    if let Some(tx) = tx.take() {
                        tx.send(()).ok();
                    }
                }
            }
        });
        self.child = Some(ChildGuard(child));
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(()) => break,
                Err(mpsc::RecvTimeoutError::Disconnected)
                | Err(mpsc::RecvTimeoutError::Timeout)
                    if !self.is_running() =>
                {
                    panic!(
                        "kmirror serve exited before listening:\n{}",
                        proc::tail(&self.log_path(), 40)
                    )
                }
                Err(_) if std::time::Instant::now() > deadline => panic!(
                    "kmirror serve printed no listening line within 60 s:\n{}",
                    proc::tail(&self.log_path(), 40)
                ),
                Err(_) => {}
            }
        }
        assert!(
            proc::port_open(&addr),
            "kmirror said it listens but {addr} refuses connections"
        );
        for (name, _) in &self.listeners {
            let a = self.listener_addr(name);
            assert!(
                proc::port_open(&a),
                "kmirror said its {name} listener is on {a} but it refuses connections"
            );
        }
    }

    fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .map(|c| matches!(c.0.try_wait(), Ok(None)))
            .unwrap_or(false)
    }

    /// PID of the running process.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("kmirror running").0.id()
    }

    /// SIGTERM and wait (at most 30 s, the shutdown budget of issue 3, then SIGKILL).
    /// Returns whether it exited by itself with status 0.
    pub fn stop(&mut self) -> bool {
        match self.child.take() {
            Some(mut c) => {
                let started = std::time::Instant::now();
                let status = proc::terminate(&mut c.0, Duration::from_secs(30));
                started.elapsed() < Duration::from_secs(30) && status.success()
            }
            None => true,
        }
    }

    /// Starts again after [`KmirrorNode::stop`] or [`KmirrorNode::kill_now`].
    pub fn start_again(&mut self) {
        self.spawn();
    }

    /// SIGKILL.
    pub fn kill_now(&mut self) {
        if let Some(mut c) = self.child.take() {
            proc::kill_now(&mut c.0);
        }
    }

    /// Whether the node was started and not killed or stopped since (without reaping: a
    /// process that crashed on its own still counts; see [`KmirrorNode::alive`]).
    pub fn started(&self) -> bool {
        self.child.is_some()
    }

    /// Whether the process is alive.
    pub fn alive(&mut self) -> bool {
        self.is_running()
    }

    /// Temp dir root (log and data).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl crate::BrokerUnderTest for KmirrorNode {
    fn bootstrap(&self) -> String {
        self.addr()
    }
    fn restart(&mut self) {
        let clean = self.stop();
        assert!(
            clean,
            "kmirror did not shut down cleanly within 30 s of SIGTERM:\n{}",
            proc::tail(&self.log_path(), 40)
        );
        self.spawn();
    }
    fn kill(&mut self) {
        self.kill_now();
    }
    fn start_again(&mut self) {
        self.spawn();
    }
    fn rss_kib(&self) -> u64 {
        proc::rss_kib(self.pid())
    }
    fn is_alive(&mut self) -> bool {
        self.is_running()
    }
}
