//! kmirror engine crate (work in progress).
