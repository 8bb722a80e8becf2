//! kmirror: the node assembly behind the `kmirror` binary ([`node`]: start a broker from
//! its settings, stop it cleanly). The binary's commands (`serve`, `mirror`, `demo`, `scram`)
//! live beside it in `main.rs`; in-process tests start nodes through this library.
//!
//! Must not: serve requests, touch partitions or run tasks on the engine's cores itself
//! (the net crate does); hold state beyond the running node's handles.

pub mod node;
