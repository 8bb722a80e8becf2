//! `kmirror mirror ...`: the mirror admin CLI (placeholder; the mirroring work replaces
//! this module). It receives the raw arguments after `mirror`, so it can define its own
//! parser without touching `main.rs`.

/// Runs `kmirror mirror <args...>`.
pub(crate) fn run(args: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let _ = args;
    Err("kmirror mirror: not yet implemented".into())
}
