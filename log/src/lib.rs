//! kmirror log crate (work in progress).
