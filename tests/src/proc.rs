//! Process plumbing shared by the runners: free ports, child guards, waiting, RSS.

use std::collections::HashSet;
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, ExitStatus};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A loopback port that was free a moment ago and that this process never handed out before,
/// for a server a test starts. Taken below the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`), where outgoing connections get their local ports: a
/// port from inside it can be handed to some client's socket between this check and the
/// server's bind (seen under the full suite as a node exiting with "Address already in
/// use"). Each process walks the range from its own starting point, so the test processes
/// running side by side rarely try the same ports.
pub fn free_port() -> u16 {
    const LOW: u32 = 10_000;
    static STATE: Mutex<Option<(u32, HashSet<u16>)>> = Mutex::new(None);
    let high = ephemeral_low();
    let mut state = STATE.lock().unwrap_or_else(|p| p.into_inner());
    if high < LOW + 1_000 {
        // An unusual range: the kernel's own choice, as before.
        let (_, given) = state.get_or_insert_with(|| (0, HashSet::new()));
        loop {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral loopback port");
            let port = l.local_addr().expect("local addr").port();
            if given.insert(port) {
                return port;
            }
        }
    }
    let span = high - LOW;
    let (cursor, given) = state.get_or_insert_with(|| {
        (
            std::process::id().wrapping_mul(7_919) % span,
            HashSet::new(),
        )
    });
    for _ in 0..span {
        let port = u16::try_from(LOW + *cursor).expect("below 65536");
        *cursor = (*cursor + 1) % span;
        if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
    panic!("no free loopback port between {LOW} and {high}");
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// Polls `f` every 50 ms until it returns `Some`, or panics with `what` after `timeout`.
pub fn wait_for<T>(timeout: Duration, what: &str, f: impl FnMut() -> Option<T>) -> T {
    wait_for_or(timeout, what, f, String::new)
}

/// [`wait_for`], and on timeout the panic also carries what `explain` says (a client's log
/// tail, say), read only then.
pub fn wait_for_or<T>(
    timeout: Duration,
    what: &str,
    mut f: impl FnMut() -> Option<T>,
    explain: impl FnOnce() -> String,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            let why = explain();
            if why.is_empty() {
                panic!("timed out after {timeout:?} waiting for {what}");
            }
            panic!("timed out after {timeout:?} waiting for {what}\n{why}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether something accepts TCP connections on `addr`.
pub fn port_open(addr: &str) -> bool {
    addr.parse()
        .ok()
        .and_then(|a| TcpStream::connect_timeout(&a, Duration::from_millis(200)).ok())
        .is_some()
}

/// Sends signal `sig` (a name such as "TERM", "STOP", "CONT") to `pid` with kill(1): keeps
/// this crate free of `unsafe`.
pub fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .status()
        .expect("run kill(1)");
    // A process that already exited is not an error for the callers.
    let _ = status;
}

/// SIGTERM, then SIGKILL if the child has not exited within `grace`. Returns its status.
pub fn terminate(child: &mut Child, grace: Duration) -> ExitStatus {
    if let Ok(Some(status)) = child.try_wait() {
        return status;
    }
    signal(child.id(), "TERM");
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return status;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait().expect("wait for killed child")
}

/// SIGKILL and reap.
pub fn kill_now(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// VmRSS of `pid` in KiB, from /proc.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"))
}

/// The last `n` lines of a log file, for panic messages.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A child process that is killed when dropped.
#[derive(Debug)]
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        kill_now(&mut self.0);
    }
}

/// What a finished command printed.
#[derive(Debug)]
pub struct Ran {
    /// Exit status.
    pub status: ExitStatus,
    /// Everything on stdout.
    pub stdout: String,
    /// Everything on stderr.
    pub stderr: String,
}

/// Runs `cmd` to completion with its output captured in temp files (no pipe deadlocks);
/// SIGKILLs it and panics after `timeout`.
pub fn run(cmd: &mut std::process::Command, timeout: Duration) -> Ran {
    run_stdin(cmd, std::process::Stdio::null(), timeout)
}

/// [`run_ok`] with `input` on the command's stdin (read from a temp file).
pub fn run_with_stdin_ok(cmd: &mut std::process::Command, input: &[u8], timeout: Duration) -> Ran {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("in");
    std::fs::write(&path, input).expect("stdin file");
    let what = format!("{cmd:?}");
    let ran = run_stdin(
        cmd,
        std::fs::File::open(&path).expect("stdin file").into(),
        timeout,
    );
    assert!(
        ran.status.success(),
        "{what} failed ({}):\nstdout tail:\n{}\nstderr tail:\n{}",
        ran.status,
        last_lines(&ran.stdout, 20),
        last_lines(&ran.stderr, 40)
    );
    ran
}

fn run_stdin(
    cmd: &mut std::process::Command,
    stdin: std::process::Stdio,
    timeout: Duration,
) -> Ran {
    let dir = tempfile::tempdir().expect("temp dir");
    let out_path = dir.path().join("out");
    let err_path = dir.path().join("err");
    let out = std::fs::File::create(&out_path).expect("stdout file");
    let err = std::fs::File::create(&err_path).expect("stderr file");
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(stdin)
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        if Instant::now() > deadline {
            kill_now(&mut child);
            panic!(
                "timed out after {timeout:?}: {what}\nstderr tail:\n{}",
                tail(&err_path, 30)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ran {
        status,
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
    }
}

/// [`run`], panicking unless the command exits 0.
pub fn run_ok(cmd: &mut std::process::Command, timeout: Duration) -> Ran {
    let what = format!("{cmd:?}");
    let ran = run(cmd, timeout);
    assert!(
        ran.status.success(),
        "{what} failed ({}):\nstdout tail:\n{}\nstderr tail:\n{}",
        ran.status,
        last_lines(&ran.stdout, 20),
        last_lines(&ran.stderr, 40)
    );
    ran
}

/// The last `n` lines of `s`.
pub fn last_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A long-running child whose stdout lines are collected in the background.
#[derive(Debug)]
pub struct LineChild {
    child: ChildGuard,
    lines: std::sync::Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    stderr_path: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl LineChild {
    /// Spawns `cmd` with stdout collected line by line and stderr to a temp file.
    pub fn spawn(cmd: &mut std::process::Command) -> Self {
        use std::io::BufRead;
        let dir = tempfile::tempdir().expect("temp dir");
        let stderr_path = dir.path().join("stderr");
        let err = std::fs::File::create(&stderr_path).expect("stderr file");
        let what = format!("{cmd:?}");
        let mut child = cmd
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        let stdout = child.stdout.take().expect("piped");
        let lines = std::sync::Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap_or_else(|p| p.into_inner()).push(line);
            }
        });
        LineChild {
            child: ChildGuard(child),
            lines,
            reader: Some(reader),
            stderr_path,
            _dir: dir,
        }
    }

    /// Number of stdout lines so far that start with `prefix`.
    pub fn count(&self, prefix: &str) -> usize {
        self.lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|l| l.starts_with(prefix))
            .count()
    }

    /// A copy of every stdout line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.0.try_wait().expect("try_wait")
    }

    /// Waits for exit (SIGKILL and panic after `timeout`), then returns status and all lines.
    pub fn wait(mut self, timeout: Duration) -> (ExitStatus, Vec<String>) {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(s) = self.exited() {
                break s;
            }
            if Instant::now() > deadline {
                kill_now(&mut self.child.0);
                panic!(
                    "child did not finish within {timeout:?}; stderr tail:\n{}\nstdout tail:\n{}",
                    tail(&self.stderr_path, 30),
                    self.lines()[self.lines().len().saturating_sub(10)..].join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        (status, self.lines())
    }

    /// The stderr tail, for failure messages.
    pub fn stderr_tail(&self, n: usize) -> String {
        tail(&self.stderr_path, n)
    }

    /// PID.
    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }
}
