//! kmirror net crate (work in progress).
