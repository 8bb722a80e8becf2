//! Crash-test hook for the failover sequence: `KMIRROR_FAILPOINT=<step>` makes the process
//! abort (no unwinding, no flush, no cleanup: what SIGKILL would leave) right after that step
//! is durable, so tests can check that recovery after a restart completes the failover exactly
//! once.
//!
//! Steps, in failover order: `after_state_stopping` (STOPPING persisted), `after_fetchers_stopped`
//! (fetcher stopped, LME captured), `after_epoch_bump`, `after_truncate`, `after_lme`,
//! `after_pid_reset_append` (control record appended, step not yet recorded),
//! `after_pid_reset` (step recorded, STOPPED not yet).
//!
//! Panic-isolation hooks take an argument, `<name>:<arg>`: `panic-on-client-id:<id>` panics
//! inside the handling of every request whose client id is `<id>`; `panic-in-append:<topic>`
//! panics inside the append job (on the partition's owning core) of a produce to `<topic>`.
//!
//! The variable is read once, on first use; when unset each check is one load of a
//! `OnceLock`. Not for production use.

use std::sync::OnceLock;

/// The environment variable naming the step to abort after.
pub const ENV: &str = "KMIRROR_FAILPOINT";

fn armed() -> Option<&'static str> {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    ARMED
        .get_or_init(|| std::env::var(ENV).ok().filter(|s| !s.is_empty()))
        .as_deref()
}

/// Reads the variable now (call at startup so a later environment change has no effect).
pub fn init() {
    if let Some(step) = armed() {
        tracing::warn!(
            step,
            "{ENV} is set: test failpoint armed (abort after a failover step, or inject panics)"
        );
    }
}

/// Whether `name` is the armed failpoint (for hooks that delay rather than abort, such as
/// `slow_fetcher_stop`: a stopped mirror fetcher keeps running for 40 s more).
pub fn is_armed(name: &str) -> bool {
    armed() == Some(name)
}

/// The argument of the armed failpoint if it is `name:<arg>`.
pub fn armed_arg(name: &str) -> Option<&'static str> {
    armed()?.strip_prefix(name)?.strip_prefix(':')
}

/// Aborts the process if `step` is the armed failpoint.
pub fn hit(step: &str) {
    if armed() == Some(step) {
        eprintln!("{ENV}: aborting after {step}");
        std::process::abort();
    }
}
